"""A simulated cluster made of Linux network namespaces, for netcheck's tests.

Every node is a network namespace with one veth toward a "switch" namespace that holds a
bridge, and a default route via a gateway namespace on that bridge (as every real node has
one), so the nodes talk over a real kernel TCP/IP path and every fault (firewall
rules, bandwidth limits, MTU mismatches, decoy interfaces, broken /etc/hosts) is a real
one, not a mock. Nothing here touches the root namespace's interfaces, routes or
firewall: the bridge lives in its own namespace and all veth pairs are created with both
ends outside the root namespace.

Requirements: root, iproute2 (`ip netns`), util-linux `unshare`, `iptables`/`ip6tables`
and `tc`. Only addresses from 198.18.0.0/15 (RFC 2544 benchmarking space) are used.

Import this module as `cluster` (tests/ is on sys.path through conftest.py); importing
it twice under two names would give two registries of live clusters.
"""

from __future__ import annotations

import atexit
import ipaddress
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from forked import ForkedNetcheck

__all__ = [
    "Cluster",
    "ClusterError",
    "Node",
    "NodeSpec",
    "cleanup_stale",
    "namespaces_supported",
    "netns_pids",
]

NETNS_ETC = Path("/etc/netns")
NETNS_RUN = Path("/run/netns")
IFNAMSIZ = 15  # the kernel's limit on interface names, not counting the NUL
SETUP_TIMEOUT = 30.0
CONNTRACK_FILL = Path(__file__).with_name("conntrack_fill.py")
FILL_TIMEOUT = 60.0   # 262,144 entries took 2-6 s on a loaded 2-core machine
# The IP packet length from which a lossy link drops: full frames, which a link's bit errors hit
# ~20 times as often as a 64-byte one. Small ones are spared so that the test's few seconds of
# sweep are not spent in the 1 s retransmission timeout of a new connection's first message.
LONG_PACKET_MIN = 1000
# Namespace names carry the creating pid so a later run can tell leftovers of a crashed
# run (dead pid) from those of a concurrent one (live pid).
NAME_RE = re.compile(r"^nct(?P<pid>\d+)x(?P<n>\d+)-")
TOOLS = ("ip", "unshare", "iptables", "ip6tables", "tc", "sysctl")


class ClusterError(RuntimeError):
    """A setup or teardown command failed; the message carries its stderr."""


@dataclass(frozen=True)
class NodeSpec:
    """What one simulated node looks like."""

    ifname: str = "eth0"  # the node's interface toward the switch
    mtu: int = 1500  # set on the node's interface and on its switch port
    port_mtu: int | None = None  # the switch port's own, where it differs: a path-MTU blackhole
    hostname: str | None = None  # default f"node{i}"
    dns_name: str | None = None  # the name /etc/hosts gives it, default its hostname: a node that
                                 # copies another's hostname leaves the name service as it was
    hosts_extra: tuple[str, ...] = ()  # /etc/hosts lines after the default ones
    rack: int = 0  # with racks=2: the rack (subnet 198.18.RACK.0/24, behind its own router)
    prefixlen: int | None = None  # the prefix the node is configured with, where not its subnet's


@dataclass(frozen=True)
class Node:
    """One started node; `ns` is its network namespace."""

    index: int
    ns: str
    addr: str  # no prefix length
    hostname: str
    ifname: str
    port: str = field(repr=False)  # its veth peer's name inside the switch namespace
    prefixlen: int = 24
    dns_name: str = ""  # NodeSpec.dns_name, or the hostname

    @property
    def fqdn(self) -> str:
        return f"{self.hostname}.cluster"


# --------------------------------------------------------------------------------------
# command helpers


def _run(argv: Sequence[str], *, check: bool = True, timeout: float = SETUP_TIMEOUT):
    """Run a setup command; raise ClusterError with its stderr when it fails."""
    try:
        res = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired as e:
        raise ClusterError(f"{' '.join(argv)}: timed out after {timeout}s") from e
    if check and res.returncode != 0:
        raise ClusterError(
            f"{' '.join(argv)}: exit {res.returncode}: {res.stderr.strip() or res.stdout.strip()}"
        )
    return res


def _in_ns(ns: str, *argv: str) -> list[str]:
    """argv run inside namespace `ns` (which also bind-mounts /etc/netns/<ns>/*)."""
    return ["ip", "netns", "exec", ns, *argv]


def _netns_names() -> list[str]:
    # `ip netns list` prints "name (id: N)" for namespaces that have an id.
    out = _run(["ip", "netns", "list"]).stdout
    return [line.split()[0] for line in out.splitlines() if line.strip()]


def netns_pids(ns: str) -> list[int]:
    """The processes in namespace `ns`."""
    res = _run(["ip", "netns", "pids", ns], check=False)
    return [int(p) for p in res.stdout.split() if p.isdigit()]


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _kill_netns_processes(ns: str, deadline_s: float = 5.0) -> list[int]:
    """SIGKILL everything in `ns` until nothing is left (a process may fork while we
    kill). Returns the pids still there at the deadline."""
    end = time.monotonic() + deadline_s
    while True:
        pids = netns_pids(ns)
        if not pids or time.monotonic() > end:
            return pids
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.02)


def _destroy_netns(ns: str) -> list[str]:
    """Kill the namespace's processes, delete it and its /etc/netns folder.
    Best effort: returns what could not be done instead of raising, so that one failure
    does not leave the other namespaces behind."""
    problems = []
    if left := _kill_netns_processes(ns):
        problems.append(f"{ns}: processes survived SIGKILL: {left}")
    if (NETNS_RUN / ns).exists():
        res = _run(["ip", "netns", "del", ns], check=False)
        if res.returncode != 0:
            problems.append(f"{ns}: ip netns del: {res.stderr.strip()}")
    shutil.rmtree(NETNS_ETC / ns, ignore_errors=True)
    return problems


def _write_in_place(path: Path, text: str) -> None:
    # Truncate and rewrite the same inode: `ip netns exec` bind-mounts the file, so a
    # process already running in the node sees the change only if the inode stays (an
    # atomic rename would leave it reading the old file).
    with open(path, "w") as f:
        f.write(text)


def _tbf_burst_bytes(rate: str, mtu: int) -> int:
    """A tbf bucket big enough for the rate (at least one 4 ms tick of the kernel
    timer, else tbf caps below the rate) and for two full-size frames."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?)(bit|bps)", rate.strip().lower())
    if not m:
        raise ValueError(f"rate {rate!r}: want e.g. '100mbit', '10gbit', '50mbps'")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}[m[2]]
    per_s = float(m[1]) * scale / (8 if m[3] == "bit" else 1)
    return int(max(per_s / 250, 2 * (mtu + 64), 16 * 1024))


# --------------------------------------------------------------------------------------
# capability probe and leftovers of crashed runs


@lru_cache(maxsize=1)
def namespaces_supported() -> bool:
    """True when this process can build clusters: root, the tools, and `ip netns add`
    really works here (some containers forbid it even to root)."""
    if os.geteuid() != 0:
        return False
    if not all(shutil.which(t) for t in TOOLS):
        return False
    ns = _new_prefix() + "probe"
    try:
        _run(["ip", "netns", "add", ns])
        _run(_in_ns(ns, "ip", "link", "set", "lo", "up"))
        return True
    except (ClusterError, OSError):
        return False
    finally:
        _destroy_netns(ns)


def cleanup_stale() -> list[str]:
    """Remove namespaces (and /etc/netns folders) left by harness runs whose creating
    process is dead, e.g. one killed with SIGKILL. Returns the names removed."""
    names = set(_netns_names())
    if NETNS_ETC.is_dir():
        names.update(p.name for p in NETNS_ETC.iterdir())
    removed = []
    for ns in sorted(names):
        m = NAME_RE.match(ns)
        if m and not _pid_alive(int(m["pid"])):
            _destroy_netns(ns)
            removed.append(ns)
    return removed


# --------------------------------------------------------------------------------------
# registry of live clusters, torn down at exit and on SIGTERM/SIGINT

_counter = itertools.count()
_live: set["Cluster"] = set()
_live_lock = threading.RLock()  # reentrant for the same reason as Cluster._lock
_handlers_installed = False
_stale_cleaned = False
_prev_handlers: dict[int, object] = {}  # chained to after our teardown


def _new_prefix() -> str:
    """A namespace-name prefix unique to this process and not in use."""
    while True:
        prefix = f"nct{os.getpid()}x{next(_counter)}-"
        if not any(p.name.startswith(prefix) for p in _iter_dir(NETNS_RUN)):
            return prefix


def _iter_dir(path: Path):
    try:
        return list(path.iterdir())
    except FileNotFoundError:
        return []


def _down_all() -> None:
    with _live_lock:
        clusters = list(_live)
    for c in clusters:
        try:
            c.down()
        except Exception:  # noqa: BLE001 - at exit or in a signal handler: tear down the others anyway
            pass


def _on_signal(signum, frame):
    _down_all()
    prev = _prev_handlers.get(signum, signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)  # e.g. Python's SIGINT handler raising KeyboardInterrupt
    elif prev == signal.SIG_DFL:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)



def _install_handlers() -> None:
    """atexit always; signal handlers only from the main thread (Python's rule)."""
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(_down_all)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            _prev_handlers[sig] = signal.getsignal(sig)
            signal.signal(sig, _on_signal)


# --------------------------------------------------------------------------------------


class Cluster:
    """N nodes on one switch. Use as a context manager; `down()` is idempotent.

    Node i gets 198.18.0.(10+i)/24 on `spec.ifname` and a default route via the subnet's
    gateway (198.18.0.1, a router namespace on the switch that routes nowhere: real nodes have
    one, and it changes what an address off the subnet, or one on it nobody holds, looks like;
    `gateway=False` leaves it out; with racks=2 each rack's router is its nodes' gateway);
    its hostname is set per process
    (a private UTS namespace for each command, see `popen`) and /etc/hosts,
    /etc/nsswitch.conf and /etc/resolv.conf are private to the node through
    /etc/netns/<ns>/. Name lookups use files only and DNS fails at once, so "cannot
    resolve" is fast and does not depend on the host's resolver.
    """

    def __init__(self, specs: Sequence[NodeSpec], subnet: str = "198.18.0.0/24", racks: int = 1,
                 core_mtu: int = 1500, gateway: bool = True):
        net = ipaddress.ip_network(subnet)
        if not net.subnet_of(ipaddress.ip_network("198.18.0.0/15")):
            raise ValueError(f"{subnet}: only 198.18.0.0/15 may be used")
        if len(specs) + 10 >= net.num_addresses - 1:
            raise ValueError(f"{subnet}: too small for {len(specs)} nodes")
        if racks not in (1, 2) or (racks == 2 and subnet != "198.18.0.0/24"):
            raise ValueError("one rack on any subnet, or two on 198.18.0.0/24 and 198.18.1.0/24")
        for s in specs:
            _check_ifname(s.ifname)
        self.specs = list(specs)
        self.racks, self.core_mtu, self.subnet = racks, core_mtu, net
        nets = [net] if racks == 1 else [ipaddress.ip_network(f"198.18.{r}.0/24") for r in range(racks)]
        # Each rack's router (racks=2), or the one subnet's gateway: the subnet's first address.
        self.gateways = [str(n.network_address + 1) for n in nets] if gateway or racks == 2 else []
        self.prefix = _new_prefix()
        self.switch_ns = self.prefix + "sw"
        self.nodes = [
            Node(
                index=i,
                ns=f"{self.prefix}n{i}",
                addr=str(nets[s.rack].network_address + 10 + i),
                hostname=s.hostname or f"node{i}",
                ifname=s.ifname,
                port=f"p{i}",
                prefixlen=s.prefixlen or net.prefixlen,
                dns_name=s.dns_name or s.hostname or f"node{i}",
            )
            for i, s in enumerate(self.specs)
        ]
        self._created: list[str] = []  # namespaces that exist, for down()
        self._procs: list[subprocess.Popen] = []
        # Reentrant: the signal handler may call down() while this thread holds it.
        self._lock = threading.RLock()

    # ---- lifecycle ---------------------------------------------------------------

    def __enter__(self) -> "Cluster":
        self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def up(self) -> "Cluster":
        global _stale_cleaned
        _install_handlers()
        if not _stale_cleaned:
            _stale_cleaned = True
            cleanup_stale()
        with _live_lock:
            _live.add(self)
        try:
            self._add_ns(self.switch_ns)
            for r in range(self.racks):
                self._ip(self.switch_ns, "link", "add", f"br{r}", "type", "bridge")
                self._ip(self.switch_ns, "link", "set", f"br{r}", "up")
            for node, spec in zip(self.nodes, self.specs):
                self._add_node(node, spec)
            if self.racks == 2:
                self._add_routers()
            elif self.gateways:
                self._add_gateway()
        except BaseException:
            self.down()
            raise
        return self

    def down(self) -> None:
        """Kill every process started in the nodes, delete the namespaces and their
        /etc/netns folders. Safe to call twice, and after a failed `up()`."""
        with self._lock:
            for p in self._procs:
                self._kill_group(p, signal.SIGKILL)
            problems = []
            for ns in reversed(self._created):
                problems += _destroy_netns(ns)
            self._created.clear()
            for p in self._procs:  # reap, so no zombie and no ResourceWarning remains
                _reap(p)
            self._procs.clear()
        with _live_lock:
            _live.discard(self)
        if problems:
            raise ClusterError("teardown incomplete: " + "; ".join(problems))

    def _add_ns(self, ns: str) -> None:
        _run(["ip", "netns", "add", ns])
        self._created.append(ns)
        self._ip(ns, "link", "set", "lo", "up")

    def _add_node(self, node: Node, spec: NodeSpec) -> None:
        self._add_ns(node.ns)
        self._write_etc(node)
        # Without this the link-local IPv6 address stays "tentative" (unbindable) for
        # a second or two after the link comes up; a real node finished DAD long ago.
        _run(_in_ns(node.ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0",
                    "net.ipv6.conf.default.accept_dad=0"))
        # Both veth ends are created outside the root namespace: the node end in the
        # node, the peer directly in the switch.
        self._ip(node.ns, "link", "add", node.ifname, "mtu", str(spec.mtu), "type", "veth",
                 "peer", "name", node.port, "mtu", str(spec.port_mtu or spec.mtu), "netns", self.switch_ns)
        self._ip(node.ns, "addr", "add", f"{node.addr}/{node.prefixlen}", "dev", node.ifname)
        self._ip(node.ns, "link", "set", node.ifname, "up")
        self._ip(self.switch_ns, "link", "set", node.port, "master", f"br{spec.rack}")
        self._ip(self.switch_ns, "link", "set", node.port, "up")
        gateway = self.gateways[spec.rack] if self.gateways else None
        if gateway and ipaddress.ip_address(gateway) in ipaddress.ip_interface(f"{node.addr}/{node.prefixlen}").network:
            self._ip(node.ns, "route", "add", "default", "via", gateway)

    def router_ns(self, rack: int) -> str:
        return f"{self.prefix}r{rack}"

    @property
    def gateway_ns(self) -> str | None:
        """The namespace of the one subnet's gateway (racks=1); None without one."""
        return f"{self.prefix}gw" if self.racks == 1 and self.gateways else None

    def _router(self, ns: str, address: str, mtu: int, port: str, bridge: str) -> None:
        """A router's namespace with a leg on `bridge` holding `address` (answering ARP for it),
        forwarding on, and every ICMP error sent at once (no rate limit: a refused or unrouted
        packet is said so each time, as the tests' short timeouts need). Its settings are its
        namespace's own, none of the machine's."""
        self._add_ns(ns)
        _run(_in_ns(ns, "sysctl", "-qw", "net.ipv4.ip_forward=1", "net.ipv4.icmp_ratemask=0",
                    "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"))
        self._ip(ns, "link", "add", "leg", "mtu", str(mtu), "type", "veth", "peer", "name", port, "mtu", str(mtu),
                 "netns", self.switch_ns)
        self._ip(ns, "addr", "add", address, "dev", "leg")
        self._ip(self.switch_ns, "link", "set", port, "master", bridge)
        for where, dev in ((ns, "leg"), (self.switch_ns, port)):
            self._ip(where, "link", "set", dev, "up")

    def _add_gateway(self) -> None:
        """The subnet's default gateway, as every real node has one: a router on the switch at the
        subnet's first address, the nodes' default route. It routes nowhere: it has no link but
        its leg, so what it is sent for another network it answers "network unreachable" (ICMP),
        as a router without a route there does, and what it is sent for the subnet itself it
        sends back onto the switch (with a redirect), as a router does. Nothing leaves the
        machine."""
        net = self.subnet
        mtu = max([s.mtu for s in self.specs] or [1500])
        self._router(self.gateway_ns, f"{self.gateways[0]}/{net.prefixlen}", mtu, "gw0", "br0")

    def _add_routers(self) -> None:
        """Leaf-spine in small: each rack's router has a leg on its rack's bridge (198.18.R.1/24,
        the rack's largest MTU) and a core link to the other's (198.18.254.R+1, `core_mtu`),
        and routes the other rack's subnet over it; each node's default route is its rack's
        router. A core link narrower than the nodes' MTU is routed path-MTU discovery."""
        for r in range(2):
            mtu = max([s.mtu for s in self.specs if s.rack == r] or [1500])
            self._router(self.router_ns(r), f"{self.gateways[r]}/24", mtu, f"rt{r}", f"br{r}")
        a, b = self.router_ns(0), self.router_ns(1)
        self._ip(a, "link", "add", "core", "mtu", str(self.core_mtu), "type", "veth", "peer", "name", "core",
                 "mtu", str(self.core_mtu), "netns", b)
        for r, ns in enumerate((a, b)):
            self._ip(ns, "addr", "add", f"198.18.254.{r + 1}/24", "dev", "core")
            self._ip(ns, "link", "set", "core", "up")
            self._ip(ns, "route", "add", f"198.18.{1 - r}.0/24", "via", f"198.18.254.{2 - r}")

    def advertise_prefix(self, prefix: str, wait_s: float = 10.0) -> None:
        """The subnet's gateway advertises PREFIX (IPv6) on the switch, as a router's radvd does:
        a router advertisement with PREFIX on-link (not for autoconfiguration) and itself as a
        default router, holding PREFIX's first address. Each node's kernel learns PREFIX as an
        on-link route that expires with the advertisement, and the gateway's link-local address
        as its IPv6 default route; returns once every node has both. The gateway forwards IPv6
        from then on and, as for IPv4, routes nowhere."""
        ns = self.gateway_ns
        if ns is None:
            raise ClusterError("advertise_prefix needs the one subnet's gateway (racks=1, gateway=True)")
        _run(_in_ns(ns, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1", "net.ipv6.icmp.ratelimit=0"))
        net = ipaddress.ip_network(prefix)
        self._ip(ns, "-6", "addr", "add", f"{net.network_address + 1}/{net.prefixlen}", "dev", "leg", "nodad")
        _run(_in_ns(ns, sys.executable, "-c", _SEND_RA, "leg", prefix))
        end = time.monotonic() + wait_s
        for node in self.nodes:
            while True:
                routes = _run(_in_ns(node.ns, "ip", "-6", "route", "show", "dev", node.ifname)).stdout
                if {prefix, "default"} <= {line.split()[0] for line in routes.splitlines() if line.strip()}:
                    break
                if time.monotonic() > end:
                    raise ClusterError(f"{node.hostname} did not learn {prefix} from the gateway: {routes!r}")
                _run(_in_ns(ns, sys.executable, "-c", _SEND_RA, "leg", prefix))
                time.sleep(0.2)

    def filter_frag_needed(self) -> None:
        """The routers send no 'fragmentation needed' (a firewall that drops all ICMP): routed
        path-MTU discovery fails silently, a blackhole."""
        for r in range(2):
            _run(_in_ns(self.router_ns(r), "iptables", "-w", "-A", "OUTPUT", "-p", "icmp", "--icmp-type",
                        "fragmentation-needed", "-j", "DROP"))

    def _write_etc(self, node: Node) -> None:
        d = NETNS_ETC / node.ns
        d.mkdir(parents=True, exist_ok=True)
        _write_in_place(d / "hosts", _lines(self.hosts_lines(node.index)))
        _write_in_place(d / "nsswitch.conf", _nsswitch_files_only())
        # Nothing listens on 127.0.0.1:53 in the node, so a DNS query fails at once.
        _write_in_place(d / "resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")

    # ---- /etc/hosts --------------------------------------------------------------

    def hosts_lines(self, i: int, omit: Iterable[int] = ()) -> list[str]:
        """Node i's default /etc/hosts: localhost, every node but those in `omit`
        ("addr fqdn hostname", FQDN first as hosts(5) wants, so `hostname -f` and
        socket.getfqdn() give the FQDN), then its spec's hosts_extra."""
        skip = set(omit)
        lines = ["127.0.0.1 localhost", "::1 localhost ip6-localhost ip6-loopback"]
        lines += [f"{n.addr} {n.dns_name}.cluster {n.dns_name}" for n in self.nodes if n.index not in skip]
        return lines + list(self.specs[i].hosts_extra)

    def write_hosts(self, i: int, lines: Iterable[str]) -> None:
        """Replace node i's /etc/hosts, e.g. `write_hosts(0, c.hosts_lines(0, omit=[1]))`
        (node0 cannot resolve node1) or `write_hosts(0, ["127.0.1.1 node0.cluster node0",
        *c.hosts_lines(0)])` (Debian's hostname trap; the first matching line wins).
        Processes already running in the node see the new file."""
        _write_in_place(NETNS_ETC / self.nodes[i].ns / "hosts", _lines(lines))

    # ---- processes ---------------------------------------------------------------

    def argv_in(self, i: int, argv: Sequence[str]) -> list[str]:
        """The command line that runs argv inside node i with its own hostname: a
        private UTS namespace per process, so nodes can have different hostnames while
        sharing the host's mount and pid namespaces (the venv and the repo are visible)."""
        node = self.nodes[i]
        return _in_ns(node.ns, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                      node.hostname, *argv)

    def popen(self, i: int, argv: Sequence[str], env: Mapping[str, str | None] | None = None,
              **kw) -> subprocess.Popen:
        """Start argv in node i, in its own process group (killable as a group) with
        stdout/stderr piped and text mode unless overridden. `env` is applied over
        os.environ; a None value removes that variable (e.g. a CI's MASTER_ADDR)."""
        return self._started(lambda **kw: subprocess.Popen(self.argv_in(i, argv), start_new_session=True, **kw),
                             env, kw)

    def fork_netcheck(self, i: int, args: Sequence[str], env: Mapping[str, str | None] | None = None,
                      **kw) -> subprocess.Popen:
        """`python -m netcheck ARGS` in node i as popen starts it, forked from this process
        (tests/forked.py): torch is not loaded again."""
        node = self.nodes[i]
        return self._started(lambda **kw: ForkedNetcheck(node.ns, node.hostname, list(args), **kw), env, kw)

    def _started(self, start, env: Mapping[str, str | None] | None, kw: dict) -> subprocess.Popen:
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("text", True)
        with self._lock:
            if not self._created:
                raise ClusterError("cluster is not up")
            p = start(env=_merge_env(env), **kw)
            self._procs.append(p)
        return p

    def run(self, i: int, argv: Sequence[str], timeout: float,
            env: Mapping[str, str | None] | None = None, **kw) -> subprocess.CompletedProcess:
        """Run argv in node i and wait. On timeout the whole process group is killed
        and subprocess.TimeoutExpired raised (carrying the output so far), as
        subprocess.run does."""
        p = self.popen(i, argv, env=env, **kw)
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill(p)
            out, err = p.communicate()
            raise subprocess.TimeoutExpired(p.args, timeout, out, err) from None
        return subprocess.CompletedProcess(p.args, p.returncode, out, err)

    def kill(self, proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
        """Send sig to proc's whole process group (its children included)."""
        self._kill_group(proc, sig)

    @staticmethod
    def _kill_group(proc: subprocess.Popen, sig: int) -> None:
        if proc.returncode is not None:
            return
        try:
            os.killpg(proc.pid, sig)  # start_new_session: pgid == pid
        except ProcessLookupError:
            pass

    # ---- fault injectors -----------------------------------------------------------

    def drop_inbound(self, i: int, port: int | None = None, source: int | None = None) -> None:
        """Inbound TCP connections to node i (on `port`, or any; from node `source`, or
        anyone) get no answer: the peer sees "filtered". Only connection attempts (SYN)
        are dropped and loopback is spared, as a host firewall does, so node i's own
        outgoing connections and its local services keep working."""
        self._syn_rule(i, port, ["DROP"], source)

    def reject_inbound(self, i: int, port: int | None = None, source: int | None = None) -> None:
        """Inbound TCP connections to node i (on `port`, or any; from node `source`, or
        anyone) are answered with a reset: the peer sees "refused"."""
        self._syn_rule(i, port, ["REJECT", "--reject-with", "tcp-reset"], source)

    def allow_only_inbound(self, i: int, ports: Iterable[int]) -> None:
        """A firewall that lets in loopback, replies to node i's own connections and
        new connections to `ports` only, and drops every other inbound connection
        (e.g. the master port open, NCCL's ephemeral ports not)."""
        for ipt in ("iptables", "ip6tables"):
            self._ipt(i, ipt, "-A", "INPUT", "-i", "lo", "-j", "ACCEPT")
            for port in ports:
                self._ipt(i, ipt, "-A", "INPUT", "-p", "tcp", "--dport", str(port), "-j", "ACCEPT")
        # Dropping SYNs only is what lets established/related traffic through, without
        # depending on the conntrack module.
        self._syn_rule(i, None, ["DROP"])

    def stateful_firewall(self, i: int) -> None:
        """A stateful firewall on node i that lets everything in (replies to what the node
        opened, and every new connection), as a host firewall's accept rules do: what it adds is
        that the kernel tracks every connection into and out of the node (nf_conntrack), in its
        table of the node's namespace, which a new connection that finds it full never passes."""
        for state in ("ESTABLISHED,RELATED", "NEW"):
            self._ipt(i, "iptables", "-A", "INPUT", "-m", "conntrack", "--ctstate", state, "-j", "ACCEPT")

    def fill_conntrack(self, i: int, leave: int) -> None:
        """Node i's connection-tracking table filled to the limit less `leave` entries, for real
        (tests/conntrack_fill.py: the namespace's own count; the machine's limit never changed)."""
        done = self.run(i, [sys.executable, str(CONNTRACK_FILL), str(leave)], FILL_TIMEOUT)
        if done.returncode != 0 or not done.stdout.startswith("ready"):
            raise ClusterError(f"conntrack_fill in node{i}: exit {done.returncode}: {done.stderr[-500:]}")

    def clear_firewall(self, i: int) -> None:
        """Remove every rule added by the injectors above."""
        for ipt in ("iptables", "ip6tables"):
            self._ipt(i, ipt, "-F", "INPUT")

    def _syn_rule(self, i: int, port: int | None, target: list[str],
                  source: int | None = None) -> None:
        match = ["!", "-i", "lo", "-p", "tcp", "--syn"]
        if port is not None:
            match += ["--dport", str(port)]
        # Both families: the node's link-local IPv6 address is also a way in. A source
        # node is named by its IPv4 address, so only iptables can match it.
        families, where = ("iptables", "ip6tables"), ["-A", "INPUT"]
        if source is not None:
            match += ["-s", self.nodes[source].addr]
            # First in the chain, as a rule against one source is written before the general
            # ones: a port let in to everyone (allow_only_inbound) would shadow it (chaos seed
            # 71206, schedule 55: node1's path firewall let through, node1 joined).
            families, where = ("iptables",), ["-I", "INPUT", "1"]
        for ipt in families:
            self._ipt(i, ipt, *where, *match, "-j", *target)

    def _ipt(self, i: int, ipt: str, *args: str) -> None:
        _run(_in_ns(self.nodes[i].ns, ipt, "-w", *args))

    def cut_link(self, i: int) -> None:
        """Node i's cable pulled: its switch port goes down, so nothing passes either way
        and no peer ever hears a reset; node i's interface loses carrier."""
        _run(_in_ns(self.switch_ns, "ip", "link", "set", self.nodes[i].port, "down"))

    def mend_link(self, i: int) -> None:
        """Node i's switch port up again after cut_link: its carrier returns, and with it the
        routes it kept all along."""
        _run(_in_ns(self.switch_ns, "ip", "link", "set", self.nodes[i].port, "up"))

    def lose_inbound(self, i: int, share: float, source: int | None = None) -> None:
        """A lossy link: node i drops this share of the long TCP packets it receives (from node
        `source`, or from anyone), as a bad cable, optic or port does. Everything
        still connects; TCP resends what was lost."""
        match = ["-s", self.nodes[source].addr] if source is not None else []
        # Every n-th long packet, not a random draw over all: the statistic match counts packets,
        # and a veth hands TCP's 64 KiB offload packets across whole, so a small path moves a few
        # dozen among hundreds of bare ACKs; drawn at random, one run in six dropped no data (a
        # lost ACK is resent by nobody). Every n-th long packet always drops some (a whole offload
        # packet, its segments resent). Turning the offload off instead made clean paths resend
        # segments reordered between CPUs' queues: loss the fault did not plant.
        long = ["-m", "length", "--length", f"{LONG_PACKET_MIN}:65535"]
        every = str(round(1 / share))
        # Both families from everyone (a link loses whatever crosses it); a source is named by its
        # IPv4 address, so only iptables can match it.
        for ipt in ("iptables",) if source is not None else ("iptables", "ip6tables"):
            self._ipt(i, ipt, "-A", "INPUT", "!", "-i", "lo", "-p", "tcp", *match, *long, "-m", "statistic",
                      "--mode", "nth", "--every", every, "--packet", "0", "-j", "DROP")

    def flap(self, i: int, down_s: float = 1.0) -> None:
        """Node i's link goes down for down_s seconds and comes back up, as a flapping port
        does: its carrier drops (carrier_changes rises by two), its addresses and routes stay."""
        # At the switch's end, as a flapping cable or port is: the node's interface loses its
        # carrier and stays up, so its routes stay. Set down at the node's end, the kernel dropped
        # its routes, and a routed node's default route never came back (chaos seed 8306,
        # schedule 113: node3 cut off for good, where a flap is a second's outage).
        self.cut_link(i)
        time.sleep(down_s)   # the fault's own length, not a wait for something to happen
        self.mend_link(i)

    def segments_sent(self, i: int) -> int:
        """The TCP segments node i has sent so far (its namespace's Tcp OutSegs)."""
        lines = [line.split() for line in _run(_in_ns(self.nodes[i].ns, "cat", "/proc/net/snmp")).stdout.splitlines()
                 if line.startswith("Tcp:")]
        return int(dict(zip(lines[0], lines[1]))["OutSegs"])

    def shape(self, i: int, rate: str) -> None:
        """Limit node i's link to `rate` (tc syntax, e.g. "100mbit") both ways: tbf on
        the node's egress and on its switch port's egress (= the node's ingress).
        netem is unavailable here; tbf is."""
        node, mtu = self.nodes[i], self.specs[i].mtu
        burst = str(_tbf_burst_bytes(rate, mtu))
        for ns, dev in ((node.ns, node.ifname), (self.switch_ns, node.port)):
            _run(_in_ns(ns, "tc", "qdisc", "replace", "dev", dev, "root", "tbf",
                        "rate", rate, "burst", burst, "latency", "100ms"))

    def add_decoy(self, i: int, ifname: str, addr_cidr: str, mtu: int = 1500) -> None:
        """An interface in node i that is up and RUNNING with an address but leads
        nowhere (a docker0 or a dead second NIC): a veth whose peer stays in the node.
        Both ends are up, else the decoy would lack carrier and not be RUNNING. IPv6
        link-local addressing is off on both so the decoy has only `addr_cidr` and the
        peer has no address at all. For "docker0 with the same address on every node",
        call it for every node with e.g. "198.19.255.1/24"."""
        _check_ifname(ifname)
        peer = ifname[: IFNAMSIZ - 1] + "p"
        if peer == ifname:
            raise ValueError(f"{ifname!r}: pick a name whose peer name {peer!r} differs")
        ns = self.nodes[i].ns
        self._ip(ns, "link", "add", ifname, "mtu", str(mtu), "type", "veth",
                 "peer", "name", peer, "mtu", str(mtu))
        for dev in (ifname, peer):
            self._ip(ns, "link", "set", dev, "addrgenmode", "none")
        self._ip(ns, "addr", "add", addr_cidr, "dev", ifname)
        for dev in (ifname, peer):
            self._ip(ns, "link", "set", dev, "up")

    def vxlan_overlay(self, mtu: int, subnet: str = "198.19.0") -> None:
        """A VXLAN overlay across the nodes (flannel's shape: vx0 on SUBNET.(i+1)/24, one tunnel
        to each peer over the node's interface) at `mtu`; the namespaces' end takes it down.
        Without `dev`, the kernel takes any MTU: flannel's overlay left at its underlay's 1500."""
        for i, node in enumerate(self.nodes):
            self._ip(node.ns, "link", "add", "vx0", "type", "vxlan", "id", "42", "dstport", "4789", "local", node.addr,
                     "nolearning")
            self._ip(node.ns, "link", "set", "vx0", "mtu", str(mtu), "up")
            self._ip(node.ns, "addr", "add", f"{subnet}.{i + 1}/24", "dev", "vx0")
            for peer in self.nodes:
                if peer is not node:
                    _run(_in_ns(node.ns, "bridge", "fdb", "append", "00:00:00:00:00:00", "dev", "vx0",
                                "dst", peer.addr))

    def containerize(self, i: int, hostname: str, publish: int | None = None,
                     subnet: str = "198.19.200") -> Node:
        """Node i's netcheck moves into a container with Docker's default bridge networking: a
        namespace of its own behind a veth pair on the machine (`docker0` SUBNET.1/24 on the
        machine's side, eth0 SUBNET.2/24 in the container, its default route through the
        machine), its outbound traffic masqueraded to the machine's address, nothing published
        unless `publish` (`docker run -p PORT:PORT`: a DNAT of that port of the machine's
        address to the container). The container takes node i's place in `nodes`, with its own
        hostname (Docker gives a container its id); the machine's namespace stays behind it.
        Returns the container."""
        machine = self.nodes[i]
        inside = replace(machine, ns=f"{self.prefix}c{i}", addr=f"{subnet}.2", hostname=hostname, ifname="eth0",
                         prefixlen=24, dns_name=machine.dns_name)
        self._add_ns(inside.ns)
        d = NETNS_ETC / inside.ns
        d.mkdir(parents=True, exist_ok=True)
        # As Docker writes it: the container's own name first, then (DNS's part here) every node.
        _write_in_place(d / "hosts", _lines([f"{inside.addr} {hostname}", *self.hosts_lines(i)]))
        _write_in_place(d / "nsswitch.conf", _nsswitch_files_only())
        _write_in_place(d / "resolv.conf", "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n")
        _run(_in_ns(inside.ns, "sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"))
        self._ip(machine.ns, "link", "add", "docker0", "type", "veth", "peer", "name", "eth0", "netns", inside.ns)
        self._ip(machine.ns, "addr", "add", f"{subnet}.1/24", "dev", "docker0")
        self._ip(inside.ns, "addr", "add", f"{inside.addr}/24", "dev", "eth0")
        for ns, dev in ((machine.ns, "docker0"), (inside.ns, "eth0")):
            self._ip(ns, "link", "set", dev, "up")
        self._ip(inside.ns, "route", "add", "default", "via", f"{subnet}.1")
        _run(_in_ns(machine.ns, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
        nat = ["iptables", "-w", "-t", "nat", "-A"]
        _run(_in_ns(machine.ns, *nat, "POSTROUTING", "-s", f"{subnet}.0/24", "!", "-o", "docker0", "-j", "MASQUERADE"))
        if publish is not None:
            _run(_in_ns(machine.ns, *nat, "PREROUTING", "-d", machine.addr, "-p", "tcp", "--dport", str(publish),
                        "-j", "DNAT", "--to-destination", f"{inside.addr}:{publish}"))
        self.nodes[i] = inside
        return inside

    # ---- small helpers ---------------------------------------------------------------

    def _ip(self, ns: str, *args: str) -> None:
        _run(_in_ns(ns, "ip", *args))


# A router advertisement (RFC 4861 4.2) from the gateway's leg to all nodes: hop limit 255 as
# NDP requires, router lifetime 1800 s, one Prefix Information option (L set, A clear: the
# prefix is on-link, nobody configures an address from it). The kernel sums ICMPv6 itself.
_SEND_RA = """
import ipaddress, socket, struct, sys
dev, net = sys.argv[1], ipaddress.ip_network(sys.argv[2])
index = socket.if_nametoindex(dev)
s = socket.socket(socket.AF_INET6, socket.SOCK_RAW, socket.IPPROTO_ICMPV6)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_HOPS, 255)
s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_MULTICAST_IF, index)
ra = struct.pack("!BBHBBHII", 134, 0, 0, 64, 0, 1800, 0, 0)
info = struct.pack("!BBBBIII16s", 3, 4, net.prefixlen, 0x80, 86400, 14400, 0, net.network_address.packed)
s.sendto(ra + info, ("ff02::1", 0, 0, index))
"""


def _check_ifname(name: str) -> None:
    if not name or len(name) > IFNAMSIZ or "/" in name or any(c.isspace() for c in name):
        raise ValueError(f"interface name {name!r}: 1..{IFNAMSIZ} chars, no '/' or spaces")


def _lines(lines: Iterable[str]) -> str:
    return "".join(line.rstrip("\n") + "\n" for line in lines)


@lru_cache(maxsize=1)
def _nsswitch_files_only() -> str:
    """The host's nsswitch.conf with hosts looked up in /etc/hosts only, so no host
    plugin (dns, myhostname, resolve, mdns) answers for a node."""
    try:
        text = Path("/etc/nsswitch.conf").read_text()
    except FileNotFoundError:
        text = ""
    kept = [line for line in text.splitlines() if not re.match(r"\s*hosts\s*:", line)]
    return _lines([*kept, "hosts: files"])


def _merge_env(env: Mapping[str, str | None] | None) -> dict[str, str]:
    merged = dict(os.environ)
    for k, v in (env or {}).items():
        if v is None:
            merged.pop(k, None)
        else:
            merged[k] = v
    return merged


def _reap(p: subprocess.Popen) -> None:
    """Wait for a killed process and close its pipes: no zombie, no ResourceWarning."""
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
    for f in (p.stdin, p.stdout, p.stderr):
        if f:
            f.close()
