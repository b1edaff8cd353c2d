"""host.buffers: each node's TCP buffer bounds against the bandwidth-delay product of its paths.

One TCP connection carries, each round trip, what it may have in flight; a node's buffers bound
that. On the way out its send buffer, which the kernel's autotuning grows up to tcp_wmem's max; on
the way in the window its receive buffer advertises, grown up to tcp_rmem's max (and left at
tcp_rmem's default where tcp_moderate_rcvbuf is off); with tcp_window_scaling off, 64 KiB either
way. A socket that sets SO_SNDBUF / SO_RCVBUF (NCCL's, with NCCL_SOCKET_SNDBUF / _RCVBUF; gloo's
never do) is tuned no further: the kernel doubles what it asks, up to net.core.wmem_max /
rmem_max. About half of any buffer carries data: the kernel counts each packet's own bookkeeping
in it, and advertises about half of a receive buffer as window.

A path needs its rate times its round trip in flight (its bandwidth-delay product) for one
connection to fill it: the rate its interfaces are rated at (the slower end's; where the links
report none, as virtual ones, what the pair test measured on the median node's best pair), the
round trip the least connect the mesh timed between the two nodes (a busy machine makes a connect
late, never early). A connect's time is the path's round trip and one wake-up of the process that
waited for it, and so is each round of a connection its buffers hold back: the sender waits for
room, the receiver must read before the window opens (a namespace node at 4 KiB moved 0.29 Gb/s,
where the kernel's own 7 us round trip would allow 2.3 Gb/s and its 0.46 ms connect 0.036). gloo
speaks one connection per pair of ranks; NCCL over sockets its NCCL_NSOCKS_PERTHREAD x
NCCL_SOCKET_NTHREADS to a peer where set, which share the load. A node whose bounds let its
connections carry less than BUFFER_PATH_SHARE of a path is named, with the settings it read, the
path's need, what the bounds carry and the sysctl lines: warn, and fail where bw.pair,
bw.straggler or the plateau already measured the node short (the buffers are why). A node whose
NCCL moves its data over RDMA is not judged: its TCP carries none of it.
"""

from __future__ import annotations

from dataclasses import dataclass

from netcheck.core.bwtext import size_words, time_text
from netcheck.core.meshrecords import Attempt
from netcheck.core.model import FAIL, PASS, WARN, Finding, Member, NodeFacts, SocketBuffers, TcpMem, hostnames
from netcheck.rules.bw import measured_short
from netcheck.rules.pernode import node_names
from netcheck.rules.ports import nccl_sockets
from netcheck.rules.rdma import used_ports
from netcheck.rules.registry import (
    BUFFERS_SHORT,
    BUFFERS_SOCKOPT,
    BUFFERS_UNSCALED,
    HOST_BUFFERS,
)

BUFFER_PATH_SHARE = 0.5      # host.buffers: a node whose TCP buffers let one connection carry less
                             # than this share of its path (rate x the mesh's least round trip)

IN_FLIGHT_SHARE = 0.5     # of a buffer, what carries data (tcp_adv_win_scale's half; each packet's sk_buff)
UNSCALED_WINDOW = 65535   # TCP's window field: the most in flight where either end does not scale it
# The kernel's defaults (Documentation/networking/ip-sysctl.rst): a fix never asks for less.
KERNEL_RMEM = TcpMem(4096, 131072, 6291456)
KERNEL_WMEM = TcpMem(4096, 16384, 4194304)
MIB = 1 << 20


@dataclass(frozen=True, kw_only=True)
class Bound:
    """One setting of a node that bounds what each of its connections has in flight."""

    in_flight: int    # bytes, per connection
    kind: str         # the finding's kind where it is short
    setting: str      # as the node has it: "tcp_wmem max 4096"
    fix: str          # what lifts it: fix.format(buffer=the size that holds the path's need)
    floor: int = 0    # the least a fix asks for: the kernel's default
    share: float = IN_FLIGHT_SHARE   # bytes in flight per byte of the setting


@dataclass(frozen=True)
class PathNeed:
    """What one of a node's paths needs in flight for one connection to fill it."""

    peer: str         # the node at its other end
    rate: float       # bytes/s the path carries
    rated: str        # where that rate comes from: "10 Gb/s (eth0 - eth0)", "the pair test's ..."
    rtt: float        # seconds: the least connect round trip the mesh measured

    @property
    def need(self) -> float:
        return self.rate * self.rtt


@dataclass(frozen=True)
class Judged:
    """One node (a host's ranks together under torchrun) with its bounds and its paths."""

    ranks: tuple[int, ...]
    hostname: str
    buffers: SocketBuffers
    bounds: tuple[Bound, ...]
    streams: int      # connections a peer's traffic shares
    paths: tuple[PathNeed, ...]

    @property
    def worst(self) -> PathNeed:
        return max(self.paths, key=lambda p: p.need)

    @property
    def carries(self) -> int:
        """Bytes in flight to one peer: the least bound, on each of its connections."""
        return self.streams * min(b.in_flight for b in self.bounds)

    @property
    def short(self) -> tuple[Bound, ...]:
        """The bounds that alone keep the worst path below BUFFER_PATH_SHARE of its rate, least first."""
        need = BUFFER_PATH_SHARE * self.worst.need
        return tuple(sorted((b for b in self.bounds if self.streams * b.in_flight < need), key=lambda b: b.in_flight))


def buffer_findings(members: tuple[Member, ...], attempts: tuple[Attempt, ...], findings: list[Finding],
                    measured_gbps: float | None) -> list[Finding]:
    """Every node's buffers against its paths: the mesh's connects (attempts, with their round
    trips and interfaces), the interfaces' rates, measured_gbps (the pair test's median node's
    best pair, GB/s; None: not measured) where no interface reports one. findings: the run's so
    far, whose bw.pair, bw.straggler and bw.busbw say which nodes' figures fell short."""
    every = judged(members, attempts, measured_gbps)
    if not every:
        return []
    names, spoiled = hostnames(members), measured_short(findings, (m.rank for m in members))
    named = [j for j in every if j.short]
    if not named:
        return [_pass(every, names)]
    groups: dict[tuple[str, str], list[Judged]] = {}
    for j in named:
        why = next((spoiled[r] for r in j.ranks if r in spoiled), "")
        groups.setdefault((j.short[0].kind, why), []).append(j)
    return [_short_finding(group, kind, why, names) for (kind, why), group in groups.items()]


def judged(members: tuple[Member, ...], attempts: tuple[Attempt, ...], measured_gbps: float | None) -> list[Judged]:
    """The nodes with their buffers read, TCP carrying their data and a path to judge, in rank order."""
    by_host: dict[str, list[Member]] = {}
    for m in members:
        by_host.setdefault(m.facts.hostname, []).append(m)
    paths = _paths(members, attempts, measured_gbps)
    every = []
    for host, ms in by_host.items():
        first = ms[0]
        buffers = first.facts.buffers
        if buffers is None or not paths.get(host) or (first.facts.gpus and used_ports(first)):
            continue
        nccl = bool(first.facts.gpus)   # NCCL carries a GPU node's data, here over sockets
        streams = max(1, nccl_sockets(first.facts.socket_env)) if nccl else 1
        every.append(Judged(tuple(m.rank for m in ms), host, buffers, bounds(first.facts, buffers, nccl),
                            streams, tuple(paths[host])))
    return every


def bounds(facts: NodeFacts, buffers: SocketBuffers, nccl: bool) -> tuple[Bound, ...]:
    """What bounds each of a node's connections in flight, out and in (nccl: NCCL's sockets carry
    its data, with its own SO_SNDBUF / SO_RCVBUF where NCCL_SOCKET_SNDBUF / _RCVBUF ask one)."""
    env = facts.socket_env
    send = _asked(env, "NCCL_SOCKET_SNDBUF", buffers.wmem_max, "wmem_max", KERNEL_WMEM) if nccl else None
    receive = _asked(env, "NCCL_SOCKET_RCVBUF", buffers.rmem_max, "rmem_max", KERNEL_RMEM) if nccl else None
    found = [send or _tuned("tcp_wmem", buffers.wmem, KERNEL_WMEM)]
    if receive:
        found.append(receive)
    else:
        found.append(_tuned("tcp_rmem", buffers.rmem, KERNEL_RMEM))
        if not buffers.moderate_rcvbuf:
            found.append(Bound(in_flight=int(IN_FLIGHT_SHARE * buffers.rmem.default), kind=BUFFERS_SHORT,
                               setting=f"tcp_rmem default {buffers.rmem.default} with tcp_moderate_rcvbuf 0 "
                               "(not tuned up)",
                               fix="`sysctl -w net.ipv4.tcp_moderate_rcvbuf=1`"))
    if not buffers.window_scaling:
        found.append(Bound(in_flight=UNSCALED_WINDOW, kind=BUFFERS_UNSCALED,
                           setting="tcp_window_scaling 0 (a window of 64 KiB at most)",
                           fix="`sysctl -w net.ipv4.tcp_window_scaling=1`"))
    return tuple(found)


def _tuned(name: str, mem: TcpMem, kernel: TcpMem) -> Bound:
    """The buffer the kernel's autotuning grows up to mem.max; its fix keeps the node's least and
    first sizes where they are the kernel's or more."""
    low, first = max(mem.min, kernel.min), max(mem.default, kernel.default)
    return Bound(in_flight=int(IN_FLIGHT_SHARE * mem.max), kind=BUFFERS_SHORT, setting=f"{name} max {mem.max}",
                 fix=f"`sysctl -w net.ipv4.{name}=\"{low} {first} {{buffer}}\"`", floor=kernel.max)


def _asked(env: dict[str, str], variable: str, cap: int | None, cap_name: str, kernel: TcpMem) -> Bound | None:
    """NCCL's SO_SNDBUF / SO_RCVBUF where the variable asks one: capped at net.core.wmem_max /
    rmem_max (None: unreadable, taken as no cap), then doubled by the kernel for its own
    bookkeeping, so what was given is what is in flight."""
    value = env.get(variable, "")
    asked = int(value[:12]) if value.isdigit() else 0   # NCCL leaves the buffer alone unless asked for more than 0
    if not asked:
        return None
    given = min(asked, cap) if cap is not None else asked
    capped = f" under net.core.{cap_name} {cap}" if cap is not None and cap < asked else ""
    return Bound(in_flight=given, kind=BUFFERS_SOCKOPT, setting=f"{variable}={asked}{capped} (not tuned by the kernel)",
                 fix=f"unset {variable} (the kernel then tunes the buffer), or set it and `sysctl -w "
                 f"net.core.{cap_name}={{buffer}}` to {{buffer}} or more", floor=kernel.max, share=1.0)


def _paths(members: tuple[Member, ...], attempts: tuple[Attempt, ...],
           measured_gbps: float | None) -> dict[str, list[PathNeed]]:
    """hostname -> each of its paths to another node: the least connect round trip between the
    two (either way, any interface), and the fastest pair of interfaces they used (the one the
    job's traffic should take); the pair test's rate where no interface has one."""
    host = hostnames(members)
    speeds = {m.facts.hostname: {n.name: n.speed_mbps for n in m.facts.nics.nics} for m in members}
    rtts: dict[tuple[str, str], float] = {}
    rates: dict[tuple[str, str], tuple[int, str]] = {}
    for a in attempts:
        src, dst = host.get(a.src), host.get(a.dst)
        if not a.connected or not a.rtt_ms or src is None or dst is None or src == dst:
            continue
        pair = (src, dst) if src < dst else (dst, src)
        rtts[pair] = min(rtts.get(pair, a.rtt_ms), a.rtt_ms)
        ends = [s for s in (speeds[src].get(a.src_ifname or ""), speeds[dst].get(a.ifname)) if s]
        if ends and min(ends) > rates.get(pair, (0, ""))[0]:
            rates[pair] = (min(ends), f"{a.src_ifname} - {a.ifname}")
    paths: dict[str, list[PathNeed]] = {}
    for pair, rtt_ms in rtts.items():
        mbps, ifs = rates.get(pair, (0, ""))
        if mbps:
            rate, rated = mbps * 1e6 / 8, f"{mbps / 1000:g} Gb/s ({ifs})"
        elif measured_gbps:
            rate, rated = measured_gbps * 1e9, f"{_gbits(measured_gbps * 1e9)} (the pair test's, on the median node)"
        else:
            continue
        one, other = pair
        paths.setdefault(one, []).append(PathNeed(other, rate, rated, rtt_ms / 1e3))
        paths.setdefault(other, []).append(PathNeed(one, rate, rated, rtt_ms / 1e3))
    return paths


def _short_finding(group: list[Judged], kind: str, why: str, names: dict[int, str]) -> Finding:
    ranks = tuple(r for j in group for r in j.ranks)
    first = group[0]
    path, carries = first.worst, first.carries
    settings = " and ".join(b.setting for b in first.short)
    summary = (f"the TCP buffers of {node_names(ranks, names)} let its traffic to a peer carry at most "
               f"{_gbits(carries / path.rtt)} at the {time_text(path.rtt * 1e6)} round trip to {path.peer}, "
               f"{_share(carries / path.need)} of the {_gbits(path.rate)} path: {settings} let it hold "
               f"{size_words(carries)} in flight, the path needs {size_words(int(path.need))}; every collective "
               "across it runs at that pace" + (f" ({why} measured it short: this is why)" if why else ""))
    fixes: dict[str, list[int]] = {}   # the same lines on several nodes, said once
    for j in group:
        fixes.setdefault(", ".join(_fix(b, j) for b in j.short), []).extend(j.ranks)
    fix = "; ".join(f"on {node_names(rs, names)}: {lines}" for lines, rs in fixes.items())
    return Finding(check=HOST_BUFFERS, severity=FAIL if why else WARN, nodes=ranks, summary=summary,
                   evidence=tuple(_evidence(j) for j in group),
                   fix=fix + "; and in /etc/sysctl.d to keep it (the job's sockets meet the setting when they open)",
                   kind=kind)


def _fix(b: Bound, j: Judged) -> str:
    """b's fix, for a setting that holds the worst path's need (rounded up to a MiB), the kernel's
    default at least."""
    buffer = int(j.worst.need / j.streams / b.share)
    return b.fix.format(buffer=max(b.floor, -(-buffer // MIB) * MIB))


def _evidence(j: Judged) -> str:
    """A node's settings, what they let a connection hold, and its worst path."""
    path = j.worst
    streams = f" on each of {j.streams} connections to a peer" if j.streams > 1 else ""
    shorts = sum(1 for p in j.paths if j.carries < BUFFER_PATH_SHARE * p.need)
    return (f"{j.hostname}: {_settings(j.buffers)}; in flight at most {size_words(min(b.in_flight for b in j.bounds))}"
            f"{streams} ({', '.join(b.setting for b in j.bounds)}; about half a buffer carries data); "
            f"{j.hostname} <-> {path.peer}: {path.rated} x {time_text(path.rtt * 1e6)} needs "
            f"{size_words(int(path.need))}, {size_words(j.carries)} carries {_gbits(j.carries / path.rtt)}; "
            f"{shorts} of its {len(j.paths)} path(s) judged short")


def _settings(b: SocketBuffers) -> str:
    def shown(value: int | None) -> str:
        return "unreadable" if value is None else str(value)
    return (f"tcp_rmem {b.rmem.min} {b.rmem.default} {b.rmem.max}, tcp_wmem {b.wmem.min} {b.wmem.default} "
            f"{b.wmem.max}, rmem_max {shown(b.rmem_max)}, wmem_max {shown(b.wmem_max)}, window scaling "
            f"{'on' if b.window_scaling else 'off'}, receive autotuning {'on' if b.moderate_rcvbuf else 'off'}")


def _pass(every: list[Judged], names: dict[int, str]) -> Finding:
    ranks = tuple(r for j in every for r in j.ranks)
    widest = max(every, key=lambda j: j.worst.need)
    least = min(every, key=lambda j: j.carries)
    by_settings: dict[str, list[int]] = {}
    for j in every:
        by_settings.setdefault(_settings(j.buffers), []).extend(j.ranks)
    return Finding(check=HOST_BUFFERS, severity=PASS, nodes=ranks,
                   summary=f"one connection's TCP buffers hold the bandwidth-delay product of every path judged: the "
                   f"widest needs {size_words(int(widest.worst.need))} ({widest.hostname} <-> {widest.worst.peer}: "
                   f"{widest.worst.rated} x {time_text(widest.worst.rtt * 1e6)}), the least a node's connection "
                   f"holds in flight is {size_words(least.carries)} ({least.hostname})",
                   evidence=tuple(f"{node_names(rs, names)}: {text}" for text, rs in by_settings.items()))


def _share(ratio: float) -> str:
    """`2%`, `0.4%`: a share too small for a whole percent keeps a digit."""
    return f"{ratio:.0%}" if ratio >= 0.01 else f"{ratio:.1%}"


def _gbits(bytes_per_s: float) -> str:
    return f"{bytes_per_s * 8 / 1e9:.3g} Gb/s"
