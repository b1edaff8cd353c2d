"""The fault catalog (the campaign's nemesis): one class per fault, built for real on a
namespace cluster, each saying what it does to a real job (`Fault.expect`, the oracle's input).

Longer than 500 lines: one class per fault of the campaign (38), each with its own expectation
and the reasons for its exceptions; the catalog is read, drawn from and reviewed as one list.
"""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, ClassVar

import psutil

from cluster import NETNS_ETC, Cluster, NodeSpec, _write_in_place
from faults import Agent
from netcheck.core.budget import LOOKUPS_BEFORE_SIGN_IN
from netcheck.facts.local import usable_gpus
from netcheck.rules.ports import GLOO_LISTENERS, NCCL_LISTENERS, OWN_PORTS
from nodes import PORT, NodeRun, scaled

from .midrun import CHAINS, GOODBYE, LINE_LAG, first_row_at, land_rules, seen_at, workers_up
from .oracle import NEVER_CAME, Blame, Expect, broken, missing

if TYPE_CHECKING:
    from .generator import Schedule
    from .runner import ScheduleRun

MODES = ("ranked", "arrival", "torchrun")
DEAD_NAMESERVER = "198.18.0.250"   # in the nodes' subnet, held by no machine: no answer, ever
LOST = ("rendezvous", "mesh", "env", "bandwidth", "goodbye")   # rdzv.join lost_in_* phases, in order
PHASES = ("local", "reach", "rendezvous", "mesh", "nic", "env", "bandwidth", "goodbye")


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
    max_nodes: ClassVar[int] = 8     # the largest cluster it is drawn on (generator.SIZES: all of them)
    weight: ClassVar[float] = 1.0
    conflicts: ClassVar[tuple[str, ...]] = ()
    removes_node: ClassVar[bool] = False  # a node never takes part (absent, lost): the phases after
                                          # it run without it, and bandwidth does not run at all
    spoils_data_path: ClassVar[bool] = False  # the bandwidth phase cannot measure anything beside it
    routed: ClassVar[bool] = False   # needs the routed layout (two racks, a router each): catalog.rack_of
    # What the real job launched after netcheck meets of it (the fate oracle, fate.py): "met" the
    # fault as netcheck met it (it is in the cluster, or in the launch line); "netcheck" none of it
    # (it acted on netcheck's own run: a signal, a stop, a late start, a foreign client, a flap
    # while it measured); "later" what landed mid-run and stays (netcheck may have looked first).
    fate: ClassVar[str] = "met"

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

    def wrapper(self, i: int) -> tuple[str, ...]:
        """argv that node i's netcheck is started under (it execs the rest): a launcher's limits."""
        return ()

    @property
    def join_seconds(self) -> float:
        """What the fault adds to each joiner's way in before it signs in (its lookups): the
        schedule's --timeout grows by as much, the longer --timeout the product's fix asks for."""
        return 0.0

    def held_back(self) -> set[int]:
        """Nodes not started with the others (`act` starts them)."""
        return set()

    def act(self, run: "ScheduleRun") -> bool:
        """Called every poll while nodes run; True once the fault has done what it does."""
        return True

    def before_job(self, run: "ScheduleRun") -> None:
        """Once netcheck has ended (and the harness's helpers with it), before the real job is
        launched (--fate): put back what the fault holds in the cluster through a helper."""

    def expect(self, sched: "Schedule", run: "ScheduleRun") -> Expect:
        raise NotImplementedError


def _iptables(c: Cluster, i: int, *rule: str) -> None:
    """A rule in node i's INPUT chain, both families where the rule allows."""
    families = ("iptables",) if "-s" in rule else ("iptables", "ip6tables")
    for ipt in families:
        c.run(i, [ipt, "-w", "-A", "INPUT", *rule], timeout=10).check_returncode()


class Firewall(Fault):
    """A rule on the endpoint port whose target (DROP or REJECT) the draw picks."""

    @classmethod
    def draw_params(cls, rng, mode):
        return (("target", rng.choice(["DROP", "REJECT"])),)


class HostFirewall(Firewall):
    """The host's own rule on the endpoint port, loopback included (a rule written as
    `-p tcp --dport 29500 -j DROP`): joiners are kept out, and so is the host's store client."""

    kind = "host_firewall"
    targets = "host"
    alone = True

    def setup(self, c, run):
        target = ["REJECT", "--reject-with", "tcp-reset"] if self.param("target") == "REJECT" else ["DROP"]
        _iptables(c, 0, "-p", "tcp", "--dport", str(PORT), "-j", *target)

    def expect(self, sched, run):
        everyone = set(range(sched.n))
        joiners = everyone - {0}
        return Expect(breaks=True, seers=everyone, absent=joiners, at_fault={0},
                      blame=[Blame(0, ("rdzv.listen",), ("firewalled",))]
                      + [Blame(j, ("rdzv.reach",), reporter=j) for j in joiners])


class PathFirewall(Firewall):
    """A rule on the host against one joiner's SYNs to the endpoint port (its subnet, its
    rack): that joiner sees filtered (DROP) or refused (REJECT); the others are fine."""

    kind = "path_firewall"
    removes_node = True

    def setup(self, c, run):
        (c.drop_inbound if self.param("target") == "DROP" else c.reject_inbound)(0, PORT, source=self.node)

    def expect(self, sched, run):
        e = missing(self.node, sched)
        e.blame.append(Blame(self.node, ("rdzv.reach",), reporter=self.node))
        # The host's rule: the joiner, whose ARP the host answered, names the host (issue 65).
        e.at_fault, e.unseen = {0}, {0: HOST_BLIND}
        return e


# Why the host may leave itself out and exit 4 where its own rule keeps a joiner out: it never
# hears from that joiner, so it names it missing (without its hostname, which it never learnt).
HOST_BLIND = "its own rule keeps out a node it never hears from: it can only name that node missing"
# Why a node's one peer may be named beside it: one pair of nodes broken both ways says nothing of
# which end is the cause (rules/mesh.py: both ends named, and the summary says why).
ONE_PAIR = "one pair of nodes, broken both ways: nothing tells which end is the cause"


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
        e = broken(self.node, "mesh.connect")
        meshed = taking_part(sched)   # a node another fault keeps out leaves one pair (2-42961)
        if self.param("way") == "both" and len(meshed) == 2:
            e.excused = {n: ONE_PAIR for n in meshed - {self.node}}
        return e


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

    def before_job(self, run):
        self.setup(run.c, run)   # the other program still holds the port when the job comes

    def expect(self, sched, run):
        everyone = set(range(sched.n))
        joiners = everyone - {0}
        return Expect(breaks=True, seers=everyone, absent=joiners, at_fault={0},
                      blame=[Blame(0, ("rdzv.listen",))]
                      + [Blame(j, ("rdzv.reach",), ("not_store",), reporter=j) for j in joiners])


class SilentClients(Fault):
    """A foreign client opens 20 connections to the store and never sends a byte (a port
    scanner, a health check): the store must keep serving the nodes. Breaks nothing."""

    kind = "silent_clients"
    fate = "netcheck"
    weight = 0.5

    def act(self, run):
        run.helpers.append(Agent.start(run.c, self.node, "hostile", f"node0:{PORT}", "silent",
                                       run_id=run.sched.run_id).proc)
        return True

    def expect(self, sched, run):
        return Expect()


class HostileClient(Fault):
    """A foreign client on the store pushes the run's counters by 10,000, or sets them, the
    host's hello and the roster to "x" (issue 39): torch's store then closes the connection
    of whoever add()s next. No node may be blamed, seating goes on; where the write lands
    while the host looks, the host warns (rdzv.join, kind interference) and the nodes that
    saw it too. It lands at a random moment of the run, so a node may exit 1 where it would
    exit 0 (and where another fault breaks the job, that fault's expectation holds)."""

    kind = "hostile_client"
    fate = "netcheck"
    weight = 0.5

    @classmethod
    def draw_params(cls, rng, mode):
        return (("action", rng.choice(("push", "set"))),)

    def act(self, run):
        run.helpers.append(Agent.start(run.c, self.node, "hostile", f"node0:{PORT}", self.param("action"),
                                       run_id=run.sched.run_id).proc)
        return True

    def expect(self, sched, run):
        return Expect(may_warn=set(range(sched.n)))


class DeadNameserver(Fault):
    """Every node asks /etc/hosts, then DNS, and its nameserver is an address nobody holds
    (an isolated cluster whose DNS is down; issue 35 item 1). /etc/hosts knows every node:
    the cluster works, and each node names the nameserver, no machine answering ARP for it
    (rdzv.resolve, nameserver_no_machine)."""

    kind = "dead_nameserver"
    modes = ("ranked",)
    targets = "host"
    weight = 0.5
    conflicts = ("shaped_link", "mtu_blackhole", "lossy_link", "link_flap")   # bandwidth workers each wait out a lookup

    def setup(self, c, run):
        for node in c.nodes:
            _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
            _write_in_place(NETNS_ETC / node.ns / "resolv.conf",
                            f"nameserver {DEAD_NAMESERVER}\noptions timeout:2 attempts:1\n")

    def expect(self, sched, run):
        return Expect(warns=True, blame=[Blame(0, ("rdzv.resolve",), ("nameserver_no_machine",), severity="warn")])


UNROUTED_NAMESERVER = "198.19.250.53"   # on no network the routers know: a query is refused at once


class UnroutableNameserver(Fault):
    """Every node asks /etc/hosts, then DNS, and its nameserver is an address no route leads to
    (an image built elsewhere, an air-gapped site; the node's gateway answers "network
    unreachable"): a query fails at once, none waits, and
    /etc/hosts knows every node: the cluster passes without a word of waiting (issue 49)."""

    kind = "unroutable_nameserver"
    modes = MODES
    targets = "host"
    weight = 0.5
    conflicts = ("dead_nameserver",)

    def setup(self, c, run):
        for node in c.nodes:
            _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
            _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {UNROUTED_NAMESERVER}\n")

    def expect(self, sched, run):
        return Expect()


class LowDescriptorLimit(Fault):
    """The host started under a launcher's low descriptor limit (`prlimit --nofile=64:4096`, a
    job script's or a container's): netcheck lifts its own, and names the job's (host.limits
    nofile): a bare store holds these few nodes under it, a training process beside them may
    not, so a warning."""

    kind = "low_nofile"
    targets = "host"
    modes = ("ranked", "arrival")

    def wrapper(self, i):
        return ("prlimit", "--nofile=64:4096", "--") if i == self.node else ()

    def expect(self, sched, run):
        return Expect(warns=True, blame=[Blame(0, ("host.limits",), ("nofile",), severity="warn")], seers={0})


class Signal(Fault):
    """A node's netcheck gets SIGKILL, SIGSTOP, SIGTERM or SIGINT at a random moment of a
    random phase (the moment its progress line names the phase, plus a random delay)."""

    kind = "signal"
    fate = "netcheck"
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
        e = Expect(breaks=True, seers=seers, at_fault={v})
        if phase == "goodbye":
            e.unseen[v] = "lost at goodbye: the others may have finished with it"
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
            e.unseen[v] = NEVER_CAME   # stopped before its facts came, or before it signed in
            if sched.mode == "arrival":
                e.seers.discard(0)    # one-shot: the host may never have heard of it
                e.absent.add(v)
                return e
            # facts_lost: stopped between its visitor record and its facts (chaos seed 71206,
            # schedule 48: SIGTERM 3.3 s in), which the host tells apart from never coming.
            kinds = ("missing", "facts_lost", "lost_in_rendezvous") + tuple(f"lost_in_{p}" for p in LOST[1:])
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
    conflicts = ("lossy_link", "link_flap")   # tbf drops what overflows its queue: a lossy link beside one

    def setup(self, c, run):
        c.shape(self.node, "20mbit")

    def expect(self, sched, run):
        # bw.pair tells a node from its peers by its best pair: with one peer left in the phase
        # (chaos seed 8306, schedule 83: node2's facts lost on its blackhole), both ends of the one
        # pair are as slow, and nothing tells which.
        blackholed = {f.node for f in sched.faults if f.kind == "mtu_blackhole"}   # its facts never come
        if len(taking_part(sched) - blackholed) < 3:
            return Expect()
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
        # Counted among the nodes that take part: one never seated is compared with nobody.
        jumbo = {f.node for f in sched.faults if f.kind == self.kind}
        rest = taking_part(sched) - jumbo
        if not rest:   # every node that takes part is jumbo: they agree, nothing to warn of
            return Expect()
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
    # A joiner's facts are larger than a frame: lost on its link, it is never seated and the
    # bandwidth phase is skipped, so a link fault beside it has no evidence (seed 70612, schedule 38).
    conflicts = ("mtu_mismatch", "lossy_link", "link_flap", "shaped_link")

    def spec(self, i, spec):
        return replace(spec, mtu=9000)

    def setup(self, c, run):
        port = c.nodes[self.node].port
        subprocess.run(["ip", "netns", "exec", c.switch_ns, "ip", "link", "set", port, "mtu", "1500"],
                       check=True, capture_output=True, timeout=10)

    def expect(self, sched, run):
        e = broken(self.node, "mesh.connect", "nic.mtu", kinds=("blackhole",))
        if self.node == 0:   # every joiner's facts lost on the host's link: none is seated
            e.seers |= set(range(sched.n))
            e.absent |= set(range(1, sched.n))
        return e


class DecoyInterface(Fault):
    """An `ib0` that is up with an address and leads nowhere: NCCL's default picks it first.
    NCCL runs on GPUs only: on nodes without one (the namespace nodes, unless the machine has
    GPUs) a job runs gloo, and nic.nccl_default warns (issue 64)."""

    kind = "decoy_ib0"
    targets = "any"
    modes = MODES

    def setup(self, c, run):
        c.add_decoy(self.node, "ib0", f"198.19.{self.node + 1}.1/24")

    def expect(self, sched, run):
        # Told by a peer's witnessed connects, from one that reaches some node: where ephemeral
        # firewalls leave every peer reaching none, nothing tells it (chaos seed 8306, schedule 9).
        if not witnesses(self.node, sched):
            return Expect()
        if usable_gpus():
            return broken(self.node, "nic.nccl_default")
        return Expect(warns=True, blame=[Blame(self.node, ("nic.nccl_default",), severity="warn")],
                      seers={0, self.node})


def taking_part(sched) -> set[int]:
    """The nodes a schedule's faults leave in the cluster (a node removed is never seated)."""
    return set(range(sched.n)) - {f.node for f in sched.faults if f.removes_node}


def witnesses(node: int, sched) -> set[int]:
    """The peers of `node` whose connects the host can take for evidence: taking part, and
    reaching some node (an ephemeral firewall both ways mutes a node's own connects; one either
    way closes it to the others')."""
    present = taking_part(sched)
    ephemeral = [f for f in sched.faults if f.kind == "ephemeral"]
    closed = {f.node for f in ephemeral}
    mute = {f.node for f in ephemeral if f.param("way") == "both"}
    return {u for u in present - mute - {node} if present - closed - {u}}


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
        if k == 0:   # no machine holds the stale address: ARP goes unanswered, no firewall is blamed
            e = missing(j, sched)
            e.blame.append(Blame(j, ("rdzv.reach",), ("no_machine",), reporter=j))
            return e
        if k == min(taking_part(sched)):   # node<k>.cluster sorts first: torchrun's c10d hands it out
            e = broken(j, "rdzv.fqdn")
            e.blame.append(Blame(k, ("rdzv.fqdn",)))
            e.seers.add(k)
            return e
        # c10d hands its workers rank 0's FQDN alone (the first in order): another's risks (issue 64).
        return Expect(warns=True, blame=[Blame(n, ("rdzv.fqdn",), severity="warn") for n in (j, k)],
                      seers={0, j, k})


class SharedSubnet(Fault):
    """A second NIC on the nodes' subnet (a storage network given it by DHCP) whose route has
    the lower metric and leads nowhere: the kernel sends the node's traffic for the subnet out
    of it, so the node never reaches the host, and says which interface the route takes."""

    kind = "shared_subnet"
    removes_node = True

    def setup(self, c, run):
        j = self.node
        subnet, dead = f"{c.nodes[0].addr.rsplit('.', 1)[0]}.0/24", f"198.18.0.{200 + j}"
        c.add_decoy(j, "stor0", f"{dead}/24")
        for dev, src, metric in (("stor0", dead, "10"), (c.nodes[j].ifname, c.nodes[j].addr, "100")):
            c.run(j, ["ip", "route", "del", subnet, "dev", dev], timeout=10).check_returncode()
            c.run(j, ["ip", "route", "add", subnet, "dev", dev, "src", src, "metric", metric],
                  timeout=10).check_returncode()

    def expect(self, sched, run):
        e = missing(self.node, sched)
        e.blame.append(Blame(self.node, ("rdzv.reach",), ("shared_subnet",), reporter=self.node))
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
    fate = "netcheck"
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
    fate = "netcheck"
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
            return Expect(breaks=True, seers={self.node}, absent={self.node}, at_fault={self.node},
                          unseen={self.node: NEVER_CAME})
        e = broken(self.node, "rdzv.join", kinds=("missing", "late", "unseated"))
        e.unseen[self.node] = NEVER_CAME   # named missing by rank before it came, where it came past the roster
        e.absent.add(self.node)   # never seated: the checks between nodes go on without it
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
        # j's launch line is wrong; the host sees rank k claimed twice and j's own rank never.
        why = f"node{j} and node{k} claim one rank: the host cannot tell whose launch line is wrong"
        return Expect(breaks=True, seers={0}, one_of_seers=[{j, k}],
                      blame=[Blame(k, ("rdzv.join",), ("duplicate_rank",)),
                             Blame(j, ("rdzv.join",), ("missing",), rank=j)],
                      at_fault={j}, excused={k: why}, unseen={j: why})


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
            return Expect(breaks=True, seers={j}, absent={j}, at_fault={j}, unseen={j: NEVER_CAME},
                          blame=[Blame(j, ("rdzv.join",), ("duplicate_hostname",), reporter=j)])
        same = f"node{j} took node{k}'s hostname: faulty_nodes' name is both"
        return Expect(breaks=True, seers={0, j, k}, at_fault={j}, excused={k: same}, unseen={j: same},
                      blame=[Blame(n, ("rdzv.join",), ("duplicate_hostname",)) for n in (j, k)])


class Container(Fault):
    """The node's netcheck in a container on Docker's default bridge: its own namespace behind
    the machine's docker0, its connections masqueraded to the machine's address; on the host,
    only the rendezvous port published (docker run -p). The rendezvous works through it; NCCL
    and gloo would hang connecting to the container's own address, which no peer routes to."""

    kind = "container"
    targets = "any"
    spoils_data_path = True
    conflicts = ("mtu_mismatch", "mtu_blackhole", "routed", "wrong_prefix")

    @classmethod
    def fits(cls, nodes, mode):
        # One-shot, a node learns it hosts from owning the endpoint's address, which a host in
        # a container does not (the machine owns it): nobody would host. A launch line for it
        # names the rank (--node-rank 0).
        return not (nodes[0] == 0 and mode == "arrival")

    def setup(self, c, run):
        c.containerize(self.node, f"c0ffee{self.node}", publish=PORT if self.node == 0 else None)

    def expect(self, sched, run):
        return broken(self.node, "mesh.connect", kinds=("translated",))


RACKED_APART = ("mtu_mismatch", "mtu_blackhole", "container", "shared_subnet", "dead_nameserver", "stale_hosts")


class RoutedFabric(Fault):
    """Two racks on two subnets with a router each (leaf-spine): the odd nodes behind the
    second rack's router. Breaks nothing; every fault beside it runs on the routed layout."""

    kind = "routed"
    targets = "host"
    routed = True
    weight = 0.5
    conflicts = RACKED_APART

    def expect(self, sched, run):
        return Expect()


class WrongPrefix(Fault):
    """On the routed fabric, the node configured /16 where the racks are /24: it takes the other
    rack's addresses for its own link and asks ARP for them, unanswered. In the host's rack it
    reaches the host and is named by it, by its peers' prefixes; in the other, the host is one of
    those addresses, and its own report says no machine answered there: its router is no
    evidence of its prefix (every node has one), so the address comes first and the prefix
    next (no DHCP lease or router advertisement says the subnet here)."""

    kind = "wrong_prefix"
    routed = True
    spoils_data_path = True
    conflicts = RACKED_APART

    def spec(self, i, spec):
        return replace(spec, prefixlen=16) if i == self.node else spec

    def expect(self, sched, run):
        if rack_of(self.node) == rack_of(0):
            # Seen across the racks only: with every node of the other rack kept out of the
            # cluster, its peers are all on its own subnet, and it reaches them (chaos seed 8306,
            # schedule 36: node1 past the roster, node3 of another run).
            if all(rack_of(k) == rack_of(0) for k in taking_part(sched)):
                return Expect()
            return broken(self.node, "mesh.connect", kinds=("wrong_prefix",))
        e = missing(self.node, sched)
        if any(f.kind == "slow_resolver" for f in sched.faults):
            # Its nameserver (on the host, node0) is one of those addresses too: the endpoint's
            # name, which only that nameserver knows, never resolves here, and the node names its
            # nameserver out of its reach (chaos seed 63204, schedule 32: "repair the nameserver").
            e.blame.append(Blame(self.node, ("rdzv.resolve",), ("nameserver_no_machine",), reporter=self.node))
        else:
            e.blame.append(Blame(self.node, ("rdzv.reach",), ("no_machine",), reporter=self.node))
        return e


LINK_FAULTS = ("lossy_link", "link_flap", "shaped_link")   # each loses segments: one such node a schedule
WARN_OR_FAIL = ("warn", "fail")   # link.health fails where the figure it spoils fell short


# Why a lossy node's peer may be named: a lossy pair with no clean pair beside it says nothing of
# which end loses the segments (rules/link.py names both ends).
LOSSY_PAIR = "a lossy pair, and no clean pair to tell which end loses the segments: both ends named"


class LossyLink(Fault):
    """The node's link loses a share of the TCP segments it receives (iptables statistic
    DROP), from everyone or, with `path`, from one peer only: a bad cable, optic or switch
    port, where everything still connects. The job crawls; link.health names the node (its
    every pair lossy) or the path (each end clean with its other peers). Shares from 2%: the
    campaign's small sweep moves a few thousand segments a pair, too few to show 0.5% surely
    (tests/test_link_cluster.py runs 0.5% with a larger budget)."""

    kind = "lossy_link"
    targets = "peer"   # the node at fault, and the peer whose segments it loses with `path`
    bandwidth = True
    max_nodes = 4
    weight = 0.7
    conflicts = LINK_FAULTS

    @classmethod
    def draw_params(cls, rng, mode):
        return (("share", rng.choice([0.02, 0.05])), ("path", rng.random() < 0.4))

    def describe(self) -> str:
        nodes = self.nodes if self.param("path") else self.nodes[:1]
        return f"{self.kind}(" + ",".join(f"node{n}" for n in nodes) + f" share={self.param('share')}" \
            + (" path" if self.param("path") else "") + ")"

    def setup(self, c, run):
        c.lose_inbound(self.node, self.param("share"), source=self.nodes[1] if self.param("path") else None)

    def expect(self, sched, run):
        if self.param("path"):
            pair = sorted(self.nodes)
            return Expect(breaks=True, seers={0, *pair}, at_fault={self.node}, excused={self.nodes[1]: LOSSY_PAIR},
                          blame=[Blame(n, ("link.health",), ("lossy_path",), severity=WARN_OR_FAIL) for n in pair])
        # Named alone where a pair without it was judged clean both ways or it is in every lossy
        # pair; at 5% a 4-second sweep may leave one lossy pair the only evidence (seed 1,
        # schedule 1041), and that pair, the node in it, is what can be named.
        return Expect(breaks=True, seers={0, self.node}, at_fault={self.node},
                      excused={n: LOSSY_PAIR for n in range(sched.n) if n != self.node},
                      blame=[Blame(self.node, ("link.health",), ("lossy_node", "lossy_path"), severity=WARN_OR_FAIL)])


class LongFlowCut(Fault):
    """A box between two nodes resets their connections once one has carried `after` bytes
    (iptables connbytes, REJECT with a TCP reset, on the first node's INPUT from the second):
    a firewall, NAT or load balancer with a per-connection byte limit. The mesh's short
    connections pass it; the sweep's and the job's do not: the pair is named (bw.stage
    cut_flow), a worker's crash is not."""

    kind = "long_flow_cut"
    targets = "peer"   # the node whose INPUT holds the rule, and the peer whose flows it cuts
    bandwidth = True
    max_nodes = 4
    weight = 1.0
    # Its resets beside a lossy or shaped link: two causes for one sweep. Two cut pairs: the first
    # cut stops the sweep before the second pair's flows reach its limit (no evidence of it to
    # name; the next run, the first pair excluded, meets it). Beside a blackhole the sweep never
    # runs (63202 #32).
    conflicts = LINK_FAULTS + ("long_flow_cut", "mtu_blackhole")

    @classmethod
    def draw_params(cls, rng, mode):
        return (("after", rng.choice([200_000, 2_000_000])),)

    def setup(self, c, run):
        c._ipt(self.node, "iptables", "-A", "INPUT", "-p", "tcp", "-s", c.nodes[self.nodes[1]].addr, "-m",
               "connbytes", "--connbytes", f"{self.param('after')}:", "--connbytes-dir", "both",
               "--connbytes-mode", "bytes", "-j", "REJECT", "--reject-with", "tcp-reset")

    def expect(self, sched, run):
        pair = sorted(self.nodes[:2])
        # A box between the two (the rule on one's INPUT stands for it): the pair's path is at fault.
        return Expect(breaks=True, seers={0, *pair}, at_fault=set(pair),
                      blame=[Blame(n, ("bw.stage",), ("cut_flow",)) for n in pair])


class SmallBuffers(Fault):
    """The node's tcp_rmem and tcp_wmem cap every socket at 4 KiB (a hardening guide's, an old
    image's): each connection holds 2 KiB in flight, and the job crawls on that node's paths.
    host.buffers names it (a warning; a failure where bw.pair or bw.straggler measured it short);
    it is judged from the mesh's round trips and the links' rates, so the mesh must reach it."""

    kind = "small_buffers"
    targets = "any"
    bandwidth = True   # not beside a fault that keeps it out of the mesh or the data path
    max_nodes = 4
    # A slow pair beside it (which is why?); a blackhole that keeps a node's facts or the mesh's
    # round trips from the host (nothing to judge with).
    conflicts = LINK_FAULTS + ("long_flow_cut", "mtu_blackhole")

    def setup(self, c, run):
        for name in ("net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"):
            subprocess.run(["ip", "netns", "exec", c.nodes[self.node].ns, "sysctl", "-qw", f"{name}=4096 4096 4096"],
                           check=True, timeout=10)

    def expect(self, sched, run):
        # The job crawls on that node's paths, as on a shaped link: never a pass, and a failure
        # where the pair test measured the node short (the buffers are why).
        return Expect(breaks=True, seers={0, self.node}, at_fault={self.node},
                      blame=[Blame(self.node, ("host.buffers",), ("buffer_short",), severity=WARN_OR_FAIL)])


class LinkFlap(Fault):
    """The node's link goes down for a second and comes back while its bandwidth workers move
    data (its TCP segments sent rising past a mark after the phase's progress line): a
    flapping port. TCP carries the job over it; link.health names the interface."""

    kind = "link_flap"
    fate = "netcheck"
    targets = "any"
    bandwidth = True
    max_nodes = 4
    weight = 0.5
    conflicts = LINK_FAULTS
    DOWN_S = 1.0
    MOVING = 5000     # segments sent since the bandwidth phase began: the workers move data

    def act(self, run):
        victim, state = run.runs[self.node], run.fault_state.setdefault(self, {})
        node = run.c.nodes[self.node]
        if "down" in state:
            if time.monotonic() < state["down"] + self.DOWN_S:
                return False
            run.c.mend_link(self.node)
            run.notes.append(f"node{self.node}'s switch port up again ({node.ifname}'s carrier back)")
            return True
        if victim.proc.poll() is not None:
            run.notes.append(f"{self.describe()}: node{self.node} ended before the flap")
            return True
        if "base" not in state:
            if "netcheck: bandwidth..." not in victim.progress:
                return False
            state["base"] = run.c.segments_sent(self.node)
        if run.c.segments_sent(self.node) < state["base"] + self.MOVING:
            return False
        # At the switch's end (Cluster.flap's reason): set down at the node's end, a routed
        # node's default route went with it for good, a cut where a flap is a second's outage.
        run.c.cut_link(self.node)
        state["down"] = time.monotonic()
        run.notes.append(f"node{self.node}'s switch port down {state['down'] - victim.started:.1f} s after its start")
        return False

    def expect(self, sched, run):
        if "down" not in run.fault_state.get(self, {}):   # the node had ended: nothing happened
            return Expect()
        return Expect(breaks=True, seers={0, self.node}, at_fault={self.node},
                      blame=[Blame(self.node, ("link.health",), ("carrier_flap",), severity=WARN_OR_FAIL)])


class SmallPortRange(Fault):
    """One node's net.ipv4.ip_local_port_range cut to a handful of ports (a hardening guide's, a
    site that reserved the rest for its own services; issue 63). `ports` below what the job's
    processes hold there at once (each a gloo listener and a store connection): host.ports
    range_too_small on that node, and the job fails with EADDRNOTAVAIL. A joiner still joins (its
    probes reset their connections, so its store client finds the port free) and is named by every
    node; a host seats nobody (its own store client and the joiners' connections want more). Up to
    what netcheck's own closed connections hold for a minute (OWN_PORTS: its store client's
    TIME-WAIT), the job fits only once they are released: host.ports time_wait, a warning. Either
    way the sweep, which holds what the job holds and leaves as many closed, is skipped: no
    bandwidth fault beside it."""

    kind = "small_port_range"
    targets = "any"
    spoils_data_path = True
    weight = 0.7

    @classmethod
    def draw_params(cls, rng, mode):
        # Both outcomes, for the campaign's layout (job_ports()): too few for the job, or enough
        # only once netcheck's own closed connections are released.
        return (("ports", rng.choice(range(1, job_ports() + OWN_PORTS))),)

    @property
    def short(self) -> bool:
        return self.param("ports") < job_ports()

    @property
    def alone(self) -> bool:   # a host short of ports seats nobody: nothing else can be named
        return self.short and self.node == 0

    def setup(self, c, run):
        subprocess.run(["ip", "netns", "exec", c.nodes[self.node].ns, "sysctl", "-qw",
                        f"net.ipv4.ip_local_port_range={PORTS_LOW} {PORTS_LOW + self.param('ports') - 1}"],
                       check=True, timeout=10)

    def expect(self, sched, run):
        if not self.short:
            return Expect(warns=True, seers={self.node},
                          blame=[Blame(self.node, ("host.ports",), ("time_wait",), severity="warn")])
        own = Blame(self.node, ("host.ports",), ("range_too_small",), reporter=self.node)
        if self.node == 0:
            return Expect(breaks=True, seers=set(range(sched.n)), absent=set(range(1, sched.n)), blame=[own],
                          at_fault={0})
        # it joins, and names its own range, not its host (tests/test_ports_cluster.py)
        e = broken(self.node, "host.ports", kinds=("range_too_small",))
        e.blame.append(own)
        return e


PORTS_LOW = 40000       # where a cut range starts: far from the endpoint's port
JOB_PROCS = 1           # the campaign's layout: one process a node (tests/job.py launches as many)


def job_ports() -> int:
    """The ports one node's share of the campaign's job holds at once (host.ports' count, measured
    on a real gloo job: tests/test_ports_cluster.py): each process's gloo listener and its store
    connection; NCCL's two listeners a rank where the machine has GPUs."""
    return (NCCL_LISTENERS if usable_gpus() else GLOO_LISTENERS) * JOB_PROCS + JOB_PROCS


class EndpointInRange(Fault):
    """The host's ephemeral range widened to 20000-60999 for a large job (a site's tuning guide),
    the endpoint's port 29500 inside it and not in ip_local_reserved_ports: any connection there
    may take the port before the job's store listens on it (issue 63). host.ports
    endpoint_in_range warns on the host; the job runs (the port is taken only by chance)."""

    kind = "endpoint_in_range"
    targets = "host"
    weight = 0.5

    def setup(self, c, run):
        subprocess.run(["ip", "netns", "exec", c.nodes[0].ns, "sysctl", "-qw",
                        "net.ipv4.ip_local_port_range=20000 60999"], check=True, timeout=10)

    def expect(self, sched, run):
        return Expect(warns=True, seers={0},
                      blame=[Blame(0, ("host.ports",), ("endpoint_in_range",), severity="warn")])


class SlowResolver(Fault):
    """The endpoint's name (node0.cluster) known only to DNS, and the nameserver (in the host's
    namespace, as a site's dnsmasq on its head node) answers every lookup `late` s late, under
    the resolver's timeout (issue 63): every lookup succeeds, slowly, torch's store looks up each
    connection, and the job starts late. Every node names it (rdzv.resolve resolver_slow, a
    warning), and every node joins: never "missing", never "does not resolve"."""

    kind = "slow_resolver"
    targets = "host"
    weight = 0.5
    # Another nameserver, or another /etc/hosts; the bandwidth workers each wait out lookups
    conflicts = ("dead_nameserver", "unroutable_nameserver", "stale_hosts", "hostname_127011", "container",
                 "duplicate_hostname", *LINK_FAULTS, "long_flow_cut", "small_buffers", "mtu_blackhole")

    @classmethod
    def draw_params(cls, rng, mode):
        # Past SLOW_LOOKUP (1 s), under the resolver's 5 s: the run's --timeout grows by the
        # joiners' lookups (join_seconds).
        return (("late", round(rng.uniform(1.2, 2.5), 1)),)

    @property
    def join_seconds(self) -> float:
        # A joiner looks the endpoint up LOOKUPS_BEFORE_SIGN_IN times before it signs in; the host
        # waits that long past its join share only where the --timeout leaves the later phases
        # room (core/budget.py): at the campaign's own (27 s for 3 nodes: none), 1.8 s late kept
        # both joiners out, each named "missing" with that cause, while the job joined in 49 s.
        return LOOKUPS_BEFORE_SIGN_IN * self.param("late")

    def args(self, i, args):
        return [f"{ENDPOINT_NAME}:{PORT}" if a == f"node0:{PORT}" else a for a in args]

    def setup(self, c, run):
        for node in c.nodes:
            _write_in_place(NETNS_ETC / node.ns / "nsswitch.conf", "hosts: files dns\n")
            _write_in_place(NETNS_ETC / node.ns / "resolv.conf", f"nameserver {c.nodes[0].addr}\n")
            c.write_hosts(node.index, [*c.hosts_lines(node.index, omit=[0]), f"{c.nodes[0].addr} node0"])
        self._serve(run)

    def _serve(self, run) -> None:
        c = run.c
        agent = Agent.start(c, 0, "late-nameserver", "0.0.0.0:53", f"{ENDPOINT_NAME}={c.nodes[0].addr}",
                            str(self.param("late")))
        run.helpers.append(agent.proc)
        agent.wait_for("^serving$", scaled(30))

    def before_job(self, run):
        self._serve(run)   # the nameserver still answers late when the job comes

    def expect(self, sched, run):
        # A node whose prefix hides the nameserver (wrong_prefix, in the other rack) never hears
        # it: it names it out of its reach instead (WrongPrefix.expect).
        hidden = {f.node for f in sched.faults if f.kind == "wrong_prefix" and rack_of(f.node) != rack_of(0)}
        present = sorted(set(taking_part(sched)) - hidden)
        return Expect(warns=True, blame=[
            b for n in present for b in (Blame(n, ("rdzv.resolve",), ("resolver_slow",), severity="warn"),
                                         Blame(n, ("rdzv.resolve",), ("resolver_slow",), severity="warn",
                                               reporter=n))])


ENDPOINT_NAME = "node0.cluster"   # the endpoint's name only the slow nameserver knows


class OverlayMtu(Fault):
    """A VXLAN overlay across the nodes (Kubernetes' flannel shape: vx0, its own subnet, a tunnel
    to each peer over the node's interface) left at its underlay's MTU 1500 (issue 63): each
    full-size frame on it is 50 bytes too large, and the kernel learns a path MTU of 1450 while
    the mesh's full-size frames cross it (the mesh tries every address of every peer, the
    overlay's too). nic.mtu path_mtu warns, naming the nodes of those paths; the job (gloo binds
    the hostname's address, on the underlay) runs."""

    kind = "overlay_mtu"
    targets = "host"
    weight = 0.5
    # Another MTU on a node's underlay (its overlay frames then fit, or vanish); a node whose
    # overlay the mesh cannot cross (its inbound closed, its address another's or NATed); routes
    # that are not one subnet's.
    conflicts = ("mtu_mismatch", "mtu_blackhole", "container", "ephemeral", "hostname_127011", "duplicate_hostname",
                 *RACKED_APART, "routed", "wrong_prefix")

    def setup(self, c, run):
        c.vxlan_overlay(1500)

    def expect(self, sched, run):
        present = sorted(taking_part(sched))
        if len(present) < 2:
            return Expect()
        return Expect(warns=True, blame=[Blame(n, ("nic.mtu",), ("path_mtu",), severity="warn") for n in present])


class ConntrackFull(Fault):
    """A node behind a stateful firewall (its rules accept every new connection; the kernel tracks
    each) whose connection-tracking table is full (another service's flows; filled for real,
    tests/conntrack_fill.py; issue 63): the kernel drops every new connection into and out of it,
    unanswered, as a firewall's DROP looks. The node names its table (host.conntrack table_full),
    never a firewall; a joiner never reaches the store, the host lets nobody in."""

    kind = "conntrack_full"
    targets = "any"
    weight = 0.5

    @property
    def alone(self) -> bool:   # the host's full table keeps every joiner out: nobody else to name
        return self.node == 0

    @property
    def removes_node(self) -> bool:   # a joiner's own SYN to the endpoint is dropped
        return self.node != 0

    def setup(self, c, run):
        c.stateful_firewall(self.node)
        c.fill_conntrack(self.node, 0)

    def before_job(self, run):
        run.c.fill_conntrack(self.node, 0)   # kept full, as the other service keeps it

    def expect(self, sched, run):
        own = Blame(self.node, ("host.conntrack",), ("table_full",), reporter=self.node)
        # Its own unanswered connects are its table's, not a firewall's: no rdzv.listen
        # (firewalled) on the host, no rdzv.reach (filtered) on a joiner (the joiners of a full
        # host cannot see its table: theirs is rdzv.reach, pointing at host.conntrack).
        firewall = Blame(self.node, ("rdzv.listen",) if self.node == 0 else ("rdzv.reach",), reporter=self.node,
                         severity=("warn", "fail"))
        if self.node == 0:
            joiners = set(range(1, sched.n))
            return Expect(breaks=True, seers=set(range(sched.n)), absent=joiners, at_fault={0},
                          blame=[Blame(0, ("host.conntrack",), ("table_full",)), own]
                          + [Blame(j, ("rdzv.reach",), reporter=j) for j in sorted(joiners)], never=[firewall])
        e = missing(self.node, sched)
        e.blame.append(own)
        e.never.append(firewall)
        return e


# ---------------------------------------------------------------------------------------------
# faults that land mid-run (issue 62): a firewall rule, a link that goes down, a process stopped

MIDRUN_PHASES = ("mesh", "nic", "env", "bandwidth", "workers", "goodbye")
# The random delay after the victim's line for the phase (scaled when applied): the mesh, nic and
# env take a fraction of a second on 3-4 nodes; after the bandwidth line the workers import torch
# for a second or two; once they are up ("workers": on the store) the small sweep is done within
# about 2 s (its 4 s budget is the phase's, imports included); a goodbye takes milliseconds.
MIDRUN_DELAYS = {"mesh": 0.3, "nic": 0.05, "env": 0.2, "bandwidth": 1.5, "workers": 1.5, "goodbye": 0.2}
# What may be drawn beside a mid-run fault: faults that break nothing, or whose evidence the host
# has before the mesh (the host's own limits). A fault named in the mesh, nic, env or bandwidth
# phase would lose its evidence to one that lands there, and one that keeps a node out skips the
# sweep the mid-run fault is judged by. One mid-run fault a schedule.
MIDRUN_COMPANIONS = ("docker0", "silent_clients", "late_within", "routed", "unroutable_nameserver", "low_nofile")
WORKERS_POLL = 0.1   # seconds between two looks at the victim's workers (psutil, /proc)


class MidRun(Fault):
    """A fault that lands at a random moment of a random phase of a run under way, on any node,
    the host included: `phase` is the victim's progress line it waits for ("workers": its sweep's
    workers connected to the store, after the bandwidth line), `delay` the random time after it.
    The sweep is always on (the small one), so every schedule holds a phase that needs every path.

    The oracle's rules (`expect`), from the moment the fault was in place (`landed`) and the
    moments the harness saw each node's lines, less LINE_LAG (t = landed + LINE_LAG):
      R1 store: a joiner cut off from the host's store (the victim; every joiner where the host
         is the victim) must not exit 0 if t < the later of the host's and its own "goodbye..."
         line: it cannot have heard the host's verdict, which the host puts after its line and
         the joiner reads after its own. The host victim is then named (rank 0 alone, a fail
         finding) in that joiner's report.
      R2 goodbye: the host must not exit 0 where R1 holds for a joiner whose goodbye the fault
         keeps from the host's store (its own store cut, loopback included; the victim's requests
         cut by an OUTPUT rule, its link, or it stopped): it lacks that joiner's goodbye.
      R3 sweep: if t < the first measured row any node printed (and no node's "goodbye..." line
         came first), the sweep still needs every path of the victim: the host and the victim
         must not exit 0.
      Where R2 or R3 binds the host, its report names the victim (its rank alone, a fail finding;
      a host victim names itself, but for a stop, which it cannot see). Nobody else is bound: a
      bystander joiner (neither the victim nor cut off) may pass (docs/contract.md, "Promises": the exit code
      says whose fault it is), and a fault that lands where no rule binds is held only to the
      promises every schedule keeps (in time, no exit 3, no trace, a valid report)."""

    modes = ("ranked", "arrival")
    targets = "any"
    bandwidth = True
    max_nodes = 4
    removes_node = True   # it may take the node out before the sweep: no bandwidth fault beside it
    midrun: ClassVar[bool] = True

    @classmethod
    def draw_params(cls, rng, mode):
        phase = rng.choice(MIDRUN_PHASES)
        return (("phase", phase), ("delay", round(rng.uniform(0, MIDRUN_DELAYS[phase]), 2)), *cls.draw_own(rng))

    @classmethod
    def draw_own(cls, rng) -> tuple[tuple[str, object], ...]:
        return ()

    # what the fault cuts, for the rules above
    @property
    def cuts_store(self) -> bool:
        return True

    @property
    def goodbye_lost(self) -> bool:
        """Whether a joiner cut off by it cannot get its goodbye into the host's store."""
        return True

    @property
    def names_itself(self) -> bool:
        """Whether a host victim that sees it must name itself (a stop it cannot see)."""
        return True

    def heard_by(self, j: int, host_bye: float, own_bye: float) -> float:
        """The earliest a joiner j cut off by the fault can have heard the host's verdict."""
        return max(host_bye, own_bye)

    def host_also_bound(self, run, t: float, host_bye: float) -> bool:
        return False

    def land(self, run) -> None:
        raise NotImplementedError

    def act(self, run):
        victim, state = run.runs.get(self.node), run.fault_state.setdefault(self, {})
        if victim is None:
            return False   # held back (late_within): not started yet
        now = time.monotonic()
        if victim.proc.poll() is not None:
            run.notes.append(f"{self.describe()}: node{self.node} ended before the fault")
            return True
        if "due" not in state:
            if not self._reached(victim, state, now):
                return False
            state["due"] = now + scaled(self.param("delay"))
        if now < state["due"]:
            return False
        if victim.json_path.exists():   # written (atomically) at its very end: nothing left to change
            run.notes.append(f"{self.describe()}: node{self.node} had written its report before the fault")
            return True
        state["phase"], state["workers"] = _last_phase(victim), workers_up(victim.proc.pid, PORT)
        self.land(run)
        state["landed"] = time.monotonic()
        run.notes.append(f"{self.describe()} landed in node{self.node}'s {state['phase']} phase"
                         f"{' (its workers up)' if state['workers'] else ''}, "
                         f"{state['landed'] - victim.started:.1f} s after its start")
        return True

    def _reached(self, victim: NodeRun, state: dict, now: float) -> bool:
        phase = self.param("phase")
        if f"netcheck: {'bandwidth' if phase == 'workers' else phase}..." not in victim.progress:
            return False
        if phase != "workers":
            return True
        if now < state.get("polled", 0.0) + WORKERS_POLL:
            return False
        state["polled"] = now
        return workers_up(victim.proc.pid, PORT)

    def landed_in(self, run) -> str | None:
        return run.fault_state.get(self, {}).get("phase")

    def expect(self, sched, run):
        state = run.fault_state.get(self, {})
        if "landed" not in state:   # the victim ended first, or never reached the phase: nothing happened
            return Expect(speed_ok=True)
        t, v = state["landed"] + LINE_LAG, self.node
        e = Expect(breaks=True, speed_ok=True, at_fault={v})
        bye = {i: seen_at(r, GOODBYE) for i, r in run.runs.items()}
        host_bye = bye.get(0, math.inf)
        cut = sorted(i for i in run.runs if i != 0) if v == 0 else [v]
        host_sees = False
        if self.cuts_store:
            for j in cut:
                if t < self.heard_by(j, host_bye, bye[j]):       # R1
                    e.seers.add(j)
                    if v == 0:
                        e.blame.append(Blame(0, (), reporter=j, rank=0, alone=True))
                # R2: j had not heard the verdict, so had not said goodbye either
                host_sees |= self.goodbye_lost and t < max(host_bye, bye[j])
        # R3: before the sweep's first row, and before any node was past its bandwidth phase (a
        # sweep that never printed a row, skipped or cut short, is not ahead once one is)
        if t < min(first_row_at(run.runs.values()), *bye.values()):
            e.seers.add(v)
            host_sees = True
        if host_sees or self.host_also_bound(run, t, host_bye):
            e.seers.add(0)
            if v != 0 or self.names_itself:
                e.blame.append(Blame(v, (), alone=True))
        else:
            e.unseen[v] = "it landed once the host had no look left to take at it"
        return e


class MidRunFirewall(MidRun):
    """A firewall rule lands on the victim's namespace (a configuration push, a security agent):
    DROP or REJECT (TCP reset), on the endpoint port (either end: --dport and --sport, the store's
    connections), on every other port (the mesh's and the sweep's: TCP but the endpoint, and UDP)
    or on everything; in INPUT, OUTPUT or both. No interface match: loopback is included, where
    the host's own store client talks to its store."""

    kind = "midrun_firewall"
    fate = "later"
    weight = 1.5

    @classmethod
    def draw_own(cls, rng):
        return (("target", rng.choice(["DROP", "REJECT"])), ("ports", rng.choice(["endpoint", "ephemeral", "all"])),
                ("way", rng.choice(["in", "out", "both"])))

    @property
    def cuts_store(self) -> bool:
        return self.param("ports") != "ephemeral"

    @property
    def goodbye_lost(self) -> bool:
        # The host's rule cuts its own store client (loopback crosses both chains); a joiner's
        # INPUT rule lets its requests out, and a goodbye may still reach the store.
        return self.node == 0 or self.param("way") != "in"

    def land(self, run):
        land_rules(run.c, self.node, CHAINS[self.param("way")], self.param("ports"), self.param("target"), PORT)

    def expect(self, sched, run):
        e = super().expect(sched, run)
        if self.node != 0 and self.cuts_store and "landed" in run.fault_state.get(self, {}):
            # Its requests or the answers vanish in its own chain, as in a host gone (seed 65102,
            # schedule 5: "Socket Timeout", its link up): it names the host lost.
            e.unseen[self.node] = "its own rule drops its store traffic: from its seat the host stopped answering"
        return e


class MidRunLinkDown(MidRun):
    """The victim's link goes down and stays down: its own interface set down (`side=node`: the
    kernel drops its routes) or its switch port (`side=switch`: the node keeps its routes and
    loses carrier, a pulled cable)."""

    kind = "midrun_link"
    fate = "later"
    weight = 0.7

    @classmethod
    def draw_own(cls, rng):
        return (("side", rng.choice(["node", "switch"])),)

    def land(self, run):
        c, node = run.c, run.c.nodes[self.node]
        if self.param("side") == "switch":
            c.cut_link(self.node)
        else:
            subprocess.run(["ip", "netns", "exec", node.ns, "ip", "link", "set", node.ifname, "down"],
                           check=True, capture_output=True, timeout=10)


class MidRunStop(MidRun):
    """The victim's netcheck is stopped (SIGSTOP), `what=netcheck` alone (its workers, each in a
    process group of its own, run on) or `what=node` with its workers (a frozen machine), and not
    resumed until every other node has ended: then `then=SIGCONT` (it must end by its deadline,
    or at once past it, within the grace, and not as a pass where a rule binds it) or
    `then=SIGKILL` (nothing is asked of it)."""

    kind = "midrun_stop"
    fate = "netcheck"
    weight = 0.8

    @classmethod
    def draw_own(cls, rng):
        return (("what", rng.choice(["netcheck", "node"])), ("then", rng.choice(["SIGCONT", "SIGKILL"])))

    @property
    def goodbye_lost(self) -> bool:
        # A stopped joiner posts nothing. A stopped host's store takes its joiners' goodbyes into
        # its socket buffers, and reads them once resumed: its own bound is host_also_bound.
        return self.node != 0

    @property
    def names_itself(self) -> bool:
        return False

    def heard_by(self, j, host_bye, own_bye):
        # A stopped joiner already polling for the verdict may find the host's answer in its
        # socket buffer when resumed: bound only before it asked.
        return own_bye if j == self.node else max(host_bye, own_bye)

    def host_also_bound(self, run, t, host_bye):
        # A host stopped before its goodbye and resumed past its --timeout cannot have finished
        # its phases in time: never a pass (docs/contract.md, "Promises"), whatever its store had buffered.
        resumed = run.resumed_at.get(0)
        return (self.node == 0 and self.param("then") == "SIGCONT" and resumed is not None and t < host_bye
                and resumed - run.runs[0].started >= run.sched.timeout)

    def land(self, run):
        victim = run.runs[self.node]
        pids = [victim.proc.pid]
        if self.param("what") == "node":
            try:
                pids += [p.pid for p in psutil.Process(victim.proc.pid).children(recursive=True)]
            except psutil.Error:
                pass
        for pid in pids:
            try:
                os.kill(pid, signal.SIGSTOP)
            except ProcessLookupError:
                pass
        run.stopped[self.node] = victim
        run.stopped_pids[self.node] = pids
        if self.param("then") == "SIGKILL":
            run.killed_at_end.add(self.node)

    def expect(self, sched, run):
        e = super().expect(sched, run)
        if "landed" not in run.fault_state.get(self, {}):
            return e
        e.resumed.add(self.node)    # exempt while stopped; timed from its SIGCONT by the runner
        if self.param("then") == "SIGKILL":
            e.exit_codes[self.node], e.no_report = {-signal.SIGKILL}, {self.node}
        return e


def rack_of(i: int) -> int:
    """The rack of node i on the routed layout: the odd nodes in the second."""
    return i % 2


CATALOG: tuple[type[Fault], ...] = (
    HostFirewall, PathFirewall, EphemeralBlocked, Squatter, SilentClients, Signal, ShapedLink,
    MtuMismatch, MtuBlackhole, DecoyInterface, HarmlessBridge, StaleHosts, LoopbackHostname,
    LateWithin, LatePastRoster, ForeignRun, DuplicateRank, DuplicateHostname, HostileClient, DeadNameserver,
    SharedSubnet, Container, RoutedFabric, WrongPrefix, UnroutableNameserver, LowDescriptorLimit, LossyLink,
    LinkFlap, LongFlowCut, SmallBuffers, SmallPortRange, EndpointInRange, SlowResolver, OverlayMtu, ConntrackFull,
    MidRunFirewall, MidRunLinkDown, MidRunStop)
MIDRUN: tuple[type[MidRun], ...] = tuple(k for k in CATALOG if issubclass(k, MidRun))
for _kind in MIDRUN:   # one mid-run fault a schedule, and only beside its companions
    _kind.conflicts = tuple(k.kind for k in CATALOG if k.kind not in MIDRUN_COMPANIONS)

