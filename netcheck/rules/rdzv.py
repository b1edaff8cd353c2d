"""The rendezvous checks (rdzv.join, rdzv.fqdn, host.clock): who joined and who did not, name
resolution between nodes, clocks; the endpoint's (rdzv.resolve, rdzv.reach, rdzv.listen) are
rules.reach's. Facts in, findings out.

Longer than 500 lines: rdzv.join's cases (never joined, lost, unseated, late, from another run, the
same name twice) are most of it and share the gathering's reading; rdzv.fqdn and host.clock judge
the same members' results."""

from __future__ import annotations

from netcheck.core.constants import ARRIVAL_MIN_NODES, MAX_STRANGERS, SLOW_LOOKUP
from netcheck.core.model import (
    C10D,
    FAIL,
    LAUNCH,
    PASS,
    RISKS,
    STOPS,
    UNANSWERED_LOOKUP,
    WARN,
    ClockSample,
    Finding,
    Gathering,
    Impact,
    Member,
    Visitor,
    hostnames,
    is_torchrun_worker,
)
from netcheck.core.names import is_loopback
from netcheck.core.nictable import address_owners
from netcheck.core.rdzvrecords import Roster
from netcheck.rules import storetrouble
from netcheck.rules.pernode import node_count, node_names, per_table, ranks_note, ranks_text
from netcheck.rules.registry import (
    HOST_CLOCK,
    JOIN_ALONE,
    JOIN_DUPLICATE,
    JOIN_FACTS_LOST,
    JOIN_FAILED,
    JOIN_INTERFERENCE,
    JOIN_LATE,
    JOIN_LEFT_BEHIND,
    JOIN_MALFORMED,
    JOIN_MISSING,
    JOIN_NOT_SEATED,
    JOIN_SAME_NAME,
    JOIN_UNSEATED,
    LOST_PHASES,
    RDZV_FQDN,
    RDZV_JOIN,
    lost_in,
)

CLOCK_WARN_SECONDS = 2.0     # elastic agents start evicting around a few seconds of skew

# A run id that differs between nodes keeps apart torchrun's c10d rendezvous alone.
OTHER_RUN = Impact((LAUNCH,), STOPS, "torchrun's c10d rendezvous keys its nodes by --rdzv-id: a node given another "
                   "id waits in a rendezvous of its own until it times out; a launch given the master's address "
                   "and each node's rank (static) ignores the id", C10D)
OTHER_RUN_FIX = "give every node the job's one --rdzv-id (torchrun's, TORCHELASTIC_RUN_ID) and run netcheck again"


def join_findings(g: Gathering) -> list[Finding]:
    findings = _alone(g)
    for rank in g.missing_ranks:
        if str(rank) in g.refused:
            findings.append(_refused_facts(rank, g.refused[str(rank)]))
    findings += _facts_lost(g.facts_lost, g.waited)
    claimed_lost = {v.node_rank for v in g.facts_lost}   # the ranks the facts lost claim
    other_run = _came_as_other_run(g)
    findings += _never_joined(g, [r for r in g.missing_ranks if str(r) not in g.refused and r not in claimed_lost
                                  and r not in other_run])
    findings += [_other_run_missing(r, v) for r, v in sorted(other_run.items())]
    for claimed, claimants in sorted(g.duplicates.items()):
        findings.append(Finding(
            check=RDZV_JOIN, severity=FAIL, nodes=(int(claimed),),
            summary=f"node rank {claimed} was claimed by {len(claimants)} nodes: "
            f"{', '.join(claimants)}; only the first was seated",
            evidence=tuple(f"{h} claims node rank {claimed}" for h in claimants),
            fix="give every node a distinct --node-rank (torchrun: --node_rank; Slurm: one task "
            "per node)", kind=JOIN_DUPLICATE))
    findings += _unseated_findings(g.unseated)
    findings += storetrouble.foreign_findings(tuple(v for v in g.foreign if v not in other_run.values()))
    findings += storetrouble.malformed_findings(g.malformed)
    findings += storetrouble.interference_findings(g.interference)
    findings += same_name_findings(g.members)
    lost = [m.rank for m in g.members if m.results is None and m.rank not in g.copied]
    findings += lost_findings("rendezvous", hostnames(g.members), lost)
    findings += _copy_took_the_seat([m for m in g.members if m.results is None and m.rank in g.copied])
    if not any(f.severity != PASS for f in findings):
        findings.append(Finding(check=RDZV_JOIN, severity=PASS, nodes=tuple(m.rank for m in g.members),
                                summary=f"{members_count(g.members)} joined in "
                                f"{g.waited:.1f} s{_coverage(g)}"))
    return findings


def _came_as_other_run(g: Gathering) -> dict[int, Visitor]:
    """Missing ranks a node of another --rdzv-id came for (the rank it claimed, or the hostname
    the launcher listed for it): their nodes were started with another run id, not absent."""
    came: dict[int, Visitor] = {}
    for r in g.missing_ranks:
        listed = g.expected_hostnames[r] if r < len(g.expected_hostnames) else None
        v = next((v for v in g.foreign if v.node_rank == r or (listed and v.hostname == listed)), None)
        if v is not None and str(r) not in g.refused:
            came[r] = v
    return came


def _other_run_missing(rank: int, v: Visitor) -> Finding:
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=(rank,),
                   summary=f"node rank {rank} ({v.hostname}) came with run id {v.run_id!r}, "
                   "another run's: it was not tested with these nodes",
                   evidence=(f"{v.hostname} joined this store with run id {v.run_id!r}",), fix=OTHER_RUN_FIX,
                   kind=JOIN_MISSING, impact=OTHER_RUN)


def members_count(members: tuple[Member, ...]) -> str:
    """How many nodes the members are, in words (rules.reach counts the joiners that reached)."""
    return node_count([m.rank for m in members], hostnames(members),
                      any(is_torchrun_worker(m.facts.launch) for m in members))


def _copy_took_the_seat(silent: list[Member]) -> list[Finding]:
    """Seated ranks that never reported back whose facts another client had also written (a
    copy, read in the same poll as them and first): the seat went to the copy, which no
    netcheck process holds, and the node itself was turned away as the copy. The run was
    denied, no node is at fault: without --token the two cannot be told apart."""
    return [Finding(check=RDZV_JOIN, severity=FAIL, nodes=(),
                    summary=f"node rank {m.rank} ({m.facts.hostname}) was seated on a copy of its "
                    "facts that another client wrote under an arrival of its own, and never reported back: the "
                    "node itself was turned away as the copy", evidence=(f"rank {m.rank}: {m.facts.hostname}",),
                    fix=storetrouble.INTERFERENCE_FIX, kind=JOIN_INTERFERENCE) for m in silent]


def _refused_facts(rank: int, sent: str) -> Finding:
    """A node that came (its visitor record names it) and sent facts netcheck refused."""
    hostname, _, why = sent.partition(": ")
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=(rank,),
                   summary=f"node rank {rank} ({hostname}) reached the store, but netcheck "
                   "refused the facts it sent, so it was not seated", evidence=(why,),
                   fix="read that node's own report; it runs another netcheck version, or sends a value out of "
                   "range (an address, a rank or a launcher variable): the same netcheck everywhere, and "
                   "--token (NETCHECK_TOKEN) if something else writes to the port", kind=JOIN_MALFORMED)


def _facts_lost(lost: tuple[Visitor, ...], waited: float) -> list[Finding]:
    """Nodes that came (each one's visitor record, a few bytes, reached the store) and whose
    facts, a few kilobytes, never did, in one finding: what passes small packets and drops
    large ones is a path that loses full-size frames (the host's datagrams test it, nic rules),
    which each node names itself from its side. With no node count a node has no rank: it is
    named by its hostname."""
    if not lost:
        return []
    ranks = tuple(sorted({v.node_rank for v in lost if v.node_rank is not None}))
    names = {i: v.hostname for i, v in enumerate(lost)}
    which = node_names(range(len(lost)), names)
    if ranks and len(ranks) == len(lost):
        which = f"node rank{'s' if len(ranks) > 1 else ''} {ranks_text(ranks)} ({which})"
    return [Finding(check=RDZV_JOIN, severity=FAIL, nodes=ranks, summary=f"{which} reached the store, but "
                    f"{'its facts' if len(lost) == 1 else 'their facts'} never arrived in {waited:.0f} s, so "
                    f"{'it was' if len(lost) == 1 else 'they were'} not seated",
                    evidence=_facts_lost_lines(lost),
                    fix="read that node's own report: a path between it and the host that drops full-size frames "
                    "(mesh.connect blackhole there: an MTU larger than a switch port's) loses exactly this; else "
                    "its netcheck stopped right after arriving, or was too slow to publish them inside the host's "
                    "join window (a loaded machine, a --timeout near its least: give it more)", kind=JOIN_FACTS_LOST)]


def _facts_lost_lines(lost: tuple[Visitor, ...]) -> tuple[str, ...]:
    """A line per node (its hostname and address), its ranks in runs: a torchrun node's eight
    workers were eight lines."""
    by_node: dict[tuple[str, str | None], list[int | None]] = {}
    for v in lost:
        by_node.setdefault((v.hostname, v.address), []).append(v.node_rank)
    lines = []
    for (hostname, address), ranks in by_node.items():
        seated = [r for r in ranks if r is not None]
        which = f" (node rank{'s' if len(seated) > 1 else ''} {ranks_text(seated)})" if seated else ""
        came = "its visitor record (under a hundred bytes) came; its facts (larger than a frame) did not" \
            if len(ranks) == 1 else f"{len(ranks)} visitor records (under a hundred bytes each) came; their facts " \
            "(larger than a frame) did not"
        lines.append(f"{hostname}{which}{f' from {address}' if address else ''}: {came}")
    return tuple(lines)


def unranked_at_fault(lost: tuple[Visitor, ...], holes: list[Finding]) -> tuple[str, ...]:
    """The hostnames of the nodes that came without their facts and without a rank (the
    one-shot form): at fault, for an exclude list, unless the host's own link was named the
    cause of every loss (a blackhole naming the host alone)."""
    if any(f.nodes == (0,) for f in holes):
        return ()
    return tuple(v.hostname for v in lost if v.node_rank is None)


def _unseated_findings(unseated: tuple[str, ...]) -> list[Finding]:
    """The first MAX_STRANGERS nodes that came but got no seat one by one, the rest in one
    count: arrivals past --nnodes (a flood of them) do not become the report."""
    fix = "every node's --node-rank must be below --nnodes, and no more nodes may come than --nnodes says"
    findings = [Finding(check=RDZV_JOIN, severity=FAIL, nodes=(), summary=text, fix=fix,
                        kind=JOIN_UNSEATED) for text in unseated[:MAX_STRANGERS]]
    if rest := unseated[MAX_STRANGERS:]:
        findings.append(Finding(check=RDZV_JOIN, severity=FAIL, nodes=(),
                                summary=f"{len(rest)} more arrivals were not seated", evidence=rest[:MAX_STRANGERS],
                                fix=fix, kind=JOIN_UNSEATED))
    return findings


def endpoint_name_taken(host: str, addresses: tuple[str, ...]) -> Finding:
    """This node is called like the endpoint, which resolves to another machine: two nodes
    share the rendezvous host's name, and torchrun would host a store of its own here."""
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=(),
                   summary=f"this node is called {host}, the endpoint's name, but {host} "
                   f"resolves to {', '.join(addresses)}, none of them this node's: another node has "
                   "this hostname, and torchrun would host a rendezvous store here, apart from the "
                   "others", evidence=tuple(f"{host} -> {a}" for a in addresses),
                   fix="give this node a hostname of its own (hostnamectl set-hostname), or pass the "
                   "endpoint as the host's address", kind=JOIN_SAME_NAME)


def same_name_findings(members: tuple[Member, ...]) -> list[Finding]:
    """Nodes that call themselves by one name (booted from one image): NCCL tells hosts apart
    by hostname, so it takes them for one machine, and an exclude list naming one names both."""
    findings = []
    for what, name_of in (("hostname", lambda m: m.facts.hostname), ("FQDN", lambda m: m.facts.fqdn)):
        by_name: dict[str, list[Member]] = {}
        for m in members:
            by_name.setdefault(name_of(m), []).append(m)
        for name, alike in sorted(by_name.items()):
            if len({frozenset(address_owners(m.facts.nics)) for m in alike}) < 2:
                continue  # one machine's processes (torchrun's workers, a loopback run)
            if what == "FQDN" and len({m.facts.hostname for m in alike}) == 1:
                continue  # one FQDN under one hostname was said with the hostname
            ranks = tuple(m.rank for m in alike)
            findings.append(Finding(
                check=RDZV_JOIN, severity=FAIL, nodes=ranks,
                summary=f"node ranks {', '.join(map(str, ranks))} all call themselves {name!r} "
                f"({what}): the job's libraries and scheduler lists cannot tell them apart",
                evidence=tuple(f"rank {m.rank}: {what} {name}, address {m.address}" for m in alike),
                fix="give every node its own hostname (hostnamectl set-hostname NAME, and the same in "
                "/etc/hosts and DNS); nodes cloned from one image also share /etc/machine-id "
                "(systemd-machine-id-setup after removing it)", kind=JOIN_SAME_NAME))
    return findings


def _coverage(g: Gathering) -> str:
    """What a pass covers: counted nodes, or only those that came."""
    if g.expected is not None:
        return f", all {g.expected} expected"
    return (" (no node count was given: a node that never reached the host cannot be named "
            "here; --nnodes N, or a launcher's count, makes an absent node a failure)")


def _alone(g: Gathering) -> list[Finding]:
    """Without --nnodes nobody is owed, but a host that heard from no other node has proven
    nothing about the network: that is no pass. Nor is the host at fault (what kept the others
    away is theirs to say): the finding names no node, so no exclude list names the host."""
    if g.expected is not None or len(g.members) >= ARRIVAL_MIN_NODES or g.facts_lost:
        return []   # with facts lost, some came: those are named (_facts_lost)
    return [Finding(check=RDZV_JOIN, severity=FAIL, nodes=(),
                    summary=f"no other node joined in the {g.waited:.0f} s the host waited",
                    fix="start netcheck with the same --rdzv on the other nodes (or give --nnodes); "
                    "if they were started, read their reports: rdzv.reach and rdzv.resolve say "
                    "why they could not get here", kind=JOIN_ALONE)]


def _never_joined(g: Gathering, ranks: list[int]) -> list[Finding]:
    """One finding for every rank that never came, whatever their number: a torchrun node that
    never started is all its workers, and a hundred lost nodes were a hundred findings, each
    listing every node that joined."""
    if not ranks:
        return []
    workers = any(is_torchrun_worker(m.facts.launch) for m in g.members)
    unit, noun = ("rank", "ranks") if workers else ("node rank", "nodes")
    names = {r: g.expected_hostnames[r] for r in ranks if r < len(g.expected_hostnames)}
    which = (f"{unit} {ranks[0]}" if len(ranks) == 1 else f"{unit}s {ranks_text(ranks)}") + f" ({_known(ranks, names)})"
    listed = _never_joined_lines(unit, ranks, names) if len(ranks) > 1 else ()
    return [Finding(check=RDZV_JOIN, severity=FAIL, nodes=tuple(ranks),
                    summary=f"{which} never joined in {g.waited:.0f} s; {len(g.members)} of "
                    f"{g.expected} {noun} joined",
                    evidence=listed + _joined_lines(g.members), fix=_never_joined_fix(workers, len(ranks)),
                    kind=JOIN_MISSING)]


def _never_joined_lines(unit: str, ranks: list[int], names: dict[int, str]) -> tuple[str, ...]:
    """A line per rank whose hostname the launcher gave, and one per run of ranks it did not:
    800 ranks of 100 torchrun nodes that never started were 800 lines."""
    lines: list[str] = []
    unnamed: list[int] = []

    def said() -> None:
        if unnamed:
            lines.append(f"never joined: {unit}{'s' if len(unnamed) > 1 else ''} {ranks_text(unnamed)}")
            unnamed.clear()

    for r in ranks:
        if r in names or (unnamed and r != unnamed[-1] + 1):
            said()
        if r in names:
            lines.append(f"never joined: {unit} {r} {names[r]}")
        else:
            unnamed.append(r)
    said()
    return tuple(lines)


def _joined_lines(members: tuple[Member, ...]) -> tuple[str, ...]:
    """A line per hostname that joined, its ranks in runs (a torchrun node's workers one line)."""
    by_host: dict[str, list[int]] = {}
    for m in members:
        by_host.setdefault(m.facts.hostname, []).append(m.rank)
    return tuple(f"joined: {'rank' if len(r) == 1 else 'ranks'} {ranks_text(r)} {host}" for host, r in by_host.items())


def _never_joined_fix(workers: bool, count: int) -> str:
    why = "read its own report (rdzv.reach / rdzv.resolve say why it could not get here)"
    if workers:   # torchrun starts a node's workers together: a missing one failed, or its node never ran
        return f"start torchrun on the node(s) of those ranks; where a node's other workers came, read the " \
               f"missing worker's log; where it ran, {why}"
    if count == 1:
        return f"start netcheck on that node; if it was started, {why}"
    return f"start netcheck on those nodes; where one was started, {why}"


def _known(ranks: list[int], names: dict[int, str]) -> str:
    """The expected hostnames of ranks that never came, where the launcher listed them."""
    unknown = sum(r not in names for r in ranks)
    if not names:
        return "hostname unknown: it never reached the store" if len(ranks) == 1 else \
            "hostnames unknown: they never reached the store"
    return node_names(list(names), names) + (f"; {unknown} hostname(s) unknown" if unknown else "")


def latecomer_findings(late: list[tuple[str, int | None]], roster: Roster) -> list[Finding]:
    """Processes that came after the roster was posted, (hostname, the node rank it claims):
    never seated. The first MAX_STRANGERS are named one by one, the rest in one count, as
    arrivals not seated while seating are: a client posting arrivals after the roster does
    not become the report."""
    seated = roster.hostnames()
    fix = "start every node within the join window, each with its own rank"

    def why(hostname: str, claimed: int | None) -> str:
        return f"{hostname} came late and was not seated: " + (
            f"node rank {claimed} was already taken by {seated[claimed]}" if claimed in seated
            else "the rendezvous had closed")
    told = [why(*came) for came in late[:2 * MAX_STRANGERS]]
    findings = [Finding(check=RDZV_JOIN, severity=FAIL, nodes=(), summary=text, fix=fix,
                        kind=JOIN_LATE) for text in told[:MAX_STRANGERS]]
    if rest := late[MAX_STRANGERS:]:
        findings.append(Finding(check=RDZV_JOIN, severity=FAIL, nodes=(),
                                summary=f"{len(rest)} more came late and were not seated",
                                evidence=tuple(told[MAX_STRANGERS:]), fix=fix, kind=JOIN_LATE))
    return findings


def gone_before_sign_in(took: float, join_seconds: float, timeout: float, ranks: tuple[int, ...],
                        seen: str, lookup_seconds: float = 0.0) -> Finding:
    """A joiner that came to sign in past the host's join deadline and found its store gone;
    `lookup_seconds`, its own lookup of the endpoint, where that was slow: the likely cause."""
    slow = lookup_seconds >= SLOW_LOOKUP
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=ranks,
                   summary=f"this node came to sign in {took:.1f} s after it started, past the host's join "
                   f"deadline ({join_seconds:g} s after its start with --timeout {timeout:g}), and the "
                   "host's store was gone: the host had closed the rendezvous without it"
                   + (f"; its lookups take {lookup_seconds:.1f} s each (a slow resolver: rdzv.resolve "
                              "resolver_slow), and its store client makes three before it connects" if slow else ""),
                   evidence=(f"this node's store client: {seen}",) if seen else (),
                   fix=("repair this node's resolver (rdzv.resolve resolver_slow says how), or " if slow else "")
                   + "start every node within the host's join deadline; a node this slow to start (torch's "
                   "import on a loaded machine) needs a larger --timeout on every node. The host's "
                   "report says whether it ran without this node or died", kind=JOIN_LATE,
                   cause_nodes=ranks if slow else None)   # its resolver: this node's; else netcheck's deadline


def lost_findings(phase: str, names: dict[int, str], ranks: list[int], seen: str = "",
                  blackhole: bool = False, own_down: tuple[str, ...] = (), mine: tuple[int, ...] = ()) -> list[Finding]:
    """Nodes that were seated, then stopped answering before `phase` was over; `seen`, what
    this node's store client saw of it where it has more than silence (the store's error);
    `blackhole` where the path to them is known to drop full-size frames (the cause, not them);
    `own_down`, this node's (ranks `mine`) interfaces toward them, all down as they went quiet:
    its own cut link, the cause (issue 65: a cable pulled is not the host's fault)."""
    if not ranks:
        return []
    if blackhole:
        why, fix = (": the path to it drops full-size frames", "the path, not the node: set its MTU as "
                    "mesh.connect says; the node answers small requests")
    elif own_down:
        links = ", ".join(own_down)
        why, fix = (f": this node's own link ({links}) is down", f"look at this node's cable, switch port and NIC "
                    f"({links}: `ip link show`, the switch's port log); run netcheck again once it is up")
    else:
        why, fix = "", ("that node's netcheck died or hung, or the network path to it broke: look at that node "
                        "and its link")
    return [Finding(check=RDZV_JOIN, severity=FAIL, nodes=tuple(ranks),
                    summary=f"{node_names(ranks, names)} stopped answering during the {phase} "
                    f"phase{why}", evidence=(f"this node's store client: {seen}",) if seen else (), fix=fix,
                    kind=lost_in(phase), cause_nodes=_lost_cause(ranks, blackhole, own_down, mine))]


def _lost_cause(ranks: list[int], blackhole: bool, own_down: tuple[str, ...],
                mine: tuple[int, ...]) -> tuple[int, ...] | None:
    """Who is at fault for nodes gone quiet: the path's two ends where it drops full-size frames
    (mesh.connect names them alike: neither end alone tells which port is short, and the lost node
    is not blamed alone, which would clear this end); this node where its own link is down; else
    the nodes themselves (None)."""
    if blackhole:   # -1: this node before it had a rank, as mesh.connect names it
        return tuple(sorted({*ranks, *(mine or (-1,))}))
    return mine if own_down else None


def own_store_lost(phase: str, ranks: tuple[int, ...], port: int, seen: str) -> Finding:
    """The host's own requests to its store went unanswered mid-run: its port was closed since
    the rendezvous (a firewall rule pushed, a security agent) or its store hung; every joiner
    lost it too. Named under the phase the joiners name it in (the host's nic phase asks the
    env phase's go: the env phase's kind)."""
    kind = lost_in(phase if phase in LOST_PHASES else "env")
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=ranks,
                   summary=f"this node's own store on port {port} stopped answering it during the "
                   f"{phase} phase: the joiners lost it too", evidence=(f"this node's store client: {seen}",),
                   fix=f"look at this node's firewall for port {port} (a rule added since netcheck started, INPUT or "
                   "OUTPUT, loopback included) and at what else holds this machine up; run netcheck again",
                   kind=kind)


def own_link_down(phase: str, ranks: tuple[int, ...], ifnames: tuple[str, ...], joiners: int) -> Finding:
    """The host's own interfaces toward its peers went down mid-run: its joiners all went quiet
    for it, not for anything of theirs."""
    links = ", ".join(ifnames)
    kind = lost_in(phase if phase in LOST_PHASES else "env")
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=ranks,
                   summary=f"this node's link ({links}) went down during the {phase} phase: its "
                   f"{joiners} joiner(s) went quiet for it, not for anything of theirs",
                   evidence=(f"this node: {links} down (operstate) when the joiners stopped answering",),
                   fix=f"look at this node's cable, switch port and NIC ({links}: `ip link show`, the switch's port "
                   "log); run netcheck again once it is up", kind=kind)


def fqdn_findings(members: tuple[Member, ...]) -> list[Finding]:
    """Every node must resolve every other node's FQDN to one of that node's own addresses."""
    # Parsed once an interface table, not once a lookup: 45,000 lookups at 4,096 nodes.
    own = per_table(members, lambda table: frozenset(address_owners(table)))
    routable = per_table(members, lambda table: frozenset(a for a in address_owners(table) if not is_loopback(a)))
    hostname = hostnames(members)
    evidence: list[tuple[int, int, str, str]] = []
    right: set[int] = set()
    for m in members:
        for r in (m.results.resolutions if m.results else ()):
            if own.get(r.rank) == own[m.rank]:
                continue  # two nodes on one machine (a loopback run): loopback is right there
            bad = _bad_resolution(r.addresses, r.error, routable.get(r.rank, frozenset()))
            if bad:
                evidence.append((m.rank, r.rank, r.name, bad))
            else:
                right.add(r.rank)
    if not evidence:
        looked_up = sum(len(m.results.resolutions) for m in members if m.results)
        if not looked_up:
            return []  # nobody to look up: no evidence, so no pass
        if looked_up >= len(members) * (len(members) - 1):
            return [Finding(check=RDZV_FQDN, severity=PASS, nodes=tuple(sorted(own)),
                            summary="every node resolves every other node's FQDN")]
        return [Finding(check=RDZV_FQDN, severity=PASS, nodes=tuple(sorted(own)),
                        summary=f"every node resolves the FQDNs it looked up "
                        f"({looked_up}: the host's and a sample of peers', in a cluster this large)")]
    # The lookups of c10d's rank 0's FQDN stop that launch; the others only risk it (a later
    # rank 0): said apart, so that a stale line for a peer is not held at fault for a FAIL that
    # another node's name makes (campaign 63204 #65).
    first = c10d_rank0(members)
    stopping = [e for e in evidence if e[2] == first]
    return [_fqdn_finding(part, stops, first, right, hostname)
            for part, stops in ((stopping, True), ([e for e in evidence if e[2] != first], False)) if part]


def _fqdn_finding(failed: list[tuple[int, int, str, str]], stops: bool, first: str, right: set[int],
                  hostname: dict[int, str]) -> Finding:
    """One rdzv.fqdn finding over the failed lookups (looker, its target, the name, what went
    wrong): a failure where they are of c10d's rank 0's FQDN, else a warning."""
    problems = {r for src, dst, _, _ in failed for r in (src, dst)}
    lines = _lookup_lines(failed, hostname)
    causes = _fqdn_causes(failed, right)
    return Finding(check=RDZV_FQDN, severity=FAIL if stops else WARN, nodes=tuple(sorted(problems)),
                   summary=f"{len(lines)} FQDN lookup(s) between nodes fail or point elsewhere",
                   evidence=lines, fix="torchrun gives its workers rank 0's FQDN as MASTER_ADDR: add every "
                   "node's FQDN to DNS or /etc/hosts on every node, with its real address",
                   impact=_c10d_impact(first, stops), cause_nodes=causes if set(causes) != problems else None)


def _fqdn_causes(failed: list[tuple[int, int, str, str]], right: set[int]) -> tuple[int, ...]:
    """The nodes whose fault the failed lookups are: where another node resolves the same node's
    FQDN right, the node that looked it up (a stale /etc/hosts line, its own resolver: the
    healthy node whose name it is stays out); where two nodes or more look it up and none gets it
    right, the node whose name it is (its name is known nowhere: a container's own hostname, a
    DNS record missing; issue 65); otherwise both."""
    lookers: dict[int, set[int]] = {}
    for src, dst, _, _ in failed:
        lookers.setdefault(dst, set()).add(src)
    return tuple(sorted({r for src, dst, _, _ in failed for r in (
        (src,) if dst in right else (dst,) if len(lookers[dst]) >= 2 else (src, dst))}))


def c10d_rank0(members: tuple[Member, ...]) -> str:
    """The FQDN torchrun's c10d rendezvous hands every worker as MASTER_ADDR: its rank 0's, the
    agent whose FQDN sorts first (dynamic_rendezvous.py numbers the participants in the order
    of their (FQDN, pid, id) descriptors; RendezvousStoreInfo.build publishes rank 0's
    socket.getfqdn(), or its --local-addr)."""
    return min(m.facts.fqdn for m in members)


def _c10d_impact(first: str, stops: bool) -> Impact:
    """rdzv.fqdn's word: torchrun's c10d rendezvous alone looks a peer's name up, and only rank 0's."""
    static = "a job given the master's address (a static rendezvous, MASTER_ADDR an address) never looks these up"
    if stops:
        return Impact((LAUNCH,), STOPS, f"torchrun's c10d rendezvous hands every worker rank 0's FQDN as MASTER_ADDR, "
                                        f"rank 0 being the node whose FQDN sorts first, {first}, which a lookup "
                                        f"here gets wrong: its workers fail in init_process_group; {static}", C10D)
    return Impact((LAUNCH,), RISKS, f"torchrun's c10d rendezvous hands its workers rank 0's FQDN alone as MASTER_ADDR, "
                                    f"rank 0 being the node whose FQDN sorts first, {first}, which resolves right "
                                    "where looked up: it stops that job only where a node named here sorts first "
                                    f"(with other nodes, or without {first}); {static}", C10D)


def _lookup_lines(failed: list[tuple[int, int, str, str]], hostname: dict[int, str]) -> tuple[str, ...]:
    """`node0 -> node1.example (rank 1): ...`, a line per looking node and name: torchrun's ranks
    of one host look up the same names alike (their ranks listed where several did)."""
    groups: dict[tuple[str, str, str], tuple[list[int], set[int]]] = {}
    for src, dst, name, bad in failed:
        looked, wanted = groups.setdefault((hostname[src], name, bad), ([], set()))
        looked.append(src)
        wanted.add(dst)
    return tuple(f"{host}{ranks_note(looked)} -> {name} ({'rank' if len(wanted) == 1 else 'ranks'} "
                 f"{', '.join(map(str, sorted(wanted)))}): {bad}"
                 for (host, name, bad), (looked, wanted) in groups.items())


def _bad_resolution(addresses: tuple[str, ...], error: str | None, routable: frozenset[str]) -> str | None:
    """Why a lookup of a node's FQDN is wrong (None: it is not); routable, that node's own
    addresses other than loopback."""
    if error and error.startswith(UNANSWERED_LOOKUP):   # cut short: a slow or silent resolver, not the name
        return f"not answered in time ({error}), not an answer that the name does not exist"
    if error:
        return f"does not resolve ({error})"
    if routable.isdisjoint(addresses):   # at C speed: a million lookups at 100,000 ranks
        return f"resolves to {', '.join(addresses)}, none of them that node's own address"
    return None


def clock_findings(members: tuple[Member, ...]) -> list[Finding]:
    measured = [(m, clock) for m in members if m.results and (clock := m.results.clock)]
    skewed = [(m, clock) for m, clock in measured if abs(clock.offset) - clock.error > CLOCK_WARN_SECONDS]
    if not measured:
        return []  # the host alone (its own clock is the reference, not a sample)
    if not skewed:
        return [Finding(check=HOST_CLOCK, severity=PASS, nodes=tuple(m.rank for m in members),
                        summary=f"clocks agree with the host's within {CLOCK_WARN_SECONDS:g} s")]
    names = hostnames(members)
    # A host's ranks read one clock: its closest sample speaks for it.
    best: dict[str, ClockSample] = {}
    for m, clock in skewed:
        if names[m.rank] not in best or clock.error < best[names[m.rank]].error:
            best[names[m.rank]] = clock
    return [Finding(check=HOST_CLOCK, severity=WARN, nodes=tuple(m.rank for m, _ in skewed),
                    summary=f"{', '.join(best)}: clock off the host's by more than {CLOCK_WARN_SECONDS:g} s",
                    evidence=tuple(f"{host}: {clock.offset:+.3f} s (+/- {clock.error:.3f} s)"
                                   for host, clock in best.items()),
                    fix="run chrony or ntpd against one time source on every node")]


def rendezvous_failure(message: str, ranks: tuple[int, ...]) -> Finding:
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=ranks, summary=message,
                   fix="see the host's report for the cluster's view", kind=JOIN_FAILED)


def other_run_failure(message: str, ranks: tuple[int, ...]) -> Finding:
    """This node was started with another --rdzv-id than the host's: never tested with the others."""
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=ranks, summary=message, fix=OTHER_RUN_FIX, kind=JOIN_FAILED,
                   impact=OTHER_RUN)


def hosts_message_refused(key: str, why: str) -> Finding:
    """A joiner could not read what the host posted under key: said, never silently replaced
    by a guess (the guess may get this node named lost, or blamed for waiting)."""
    return Finding(check=RDZV_JOIN, severity=WARN, nodes=(),
                   summary=f"this node refused the host's message under {key}", evidence=(why,),
                   fix="the host runs another netcheck version, or something else writes the run's keys: "
                   "the same netcheck on every node, and --token (NETCHECK_TOKEN)", kind=JOIN_MALFORMED)


def left_behind_finding(ranks: tuple[int, ...]) -> Finding:
    return Finding(check=RDZV_JOIN, severity=FAIL, nodes=ranks,
                   summary="the host went on without this node: it reported back after "
                   "the host's deadline", fix="see the host's report for the cluster's view", kind=JOIN_LEFT_BEHIND)


def seat_finding(rank: int | None, nnodes: int, hostname: str, expected: int | None = None) -> Finding:
    """A joiner's own seat; where the launcher fixed the node count and fewer were seated, the
    count it says is the host's (the host names the missing)."""
    if rank is None:
        return Finding(check=RDZV_JOIN, severity=FAIL, nodes=(),
                       summary=f"{hostname} was not seated: its rank was taken, or the "
                       "cluster was full or had already started",
                       fix="check --node-rank and --nnodes on every node; see the host's report", kind=JOIN_NOT_SEATED)
    if expected is not None and expected != nnodes:
        return Finding(check=RDZV_JOIN, severity=PASS, nodes=(rank,),
                       summary=f"joined as node rank {rank}; {nnodes} of {expected} expected "
                       "nodes joined (the host's report names the missing)")
    return Finding(check=RDZV_JOIN, severity=PASS, nodes=(rank,), summary=f"joined as node rank {rank} of {nnodes}")


