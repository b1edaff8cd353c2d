"""What other clients and the store itself did to the rendezvous (rdzv.join's interference,
foreign_run, malformed and store_stalled kinds): a client writing the run's keys, a visitor of
another run, an entry refused, a store that stalled while nodes came, and the nodes it kept
out. Facts in, findings out; the join's own checks are rules.rdzv's."""

from __future__ import annotations

from netcheck.core.constants import MAX_STRANGERS
from netcheck.core.model import (
    FAIL,
    WARN,
    Finding,
    Member,
    StoreStall,
    Visitor,
)
from netcheck.core.names import is_loopback
from netcheck.core.nictable import address_owners
from netcheck.rules.registry import (
    JOIN_FOREIGN,
    JOIN_INTERFERENCE,
    JOIN_KEPT_OUT,
    JOIN_MALFORMED,
    JOIN_MISSING,
    JOIN_STORE_STALLED,
    LOST_PREFIX,
    RDZV_JOIN,
)

INTERFERENCE_FIX = ("another client writes to this port's store (another job, a scanner, a stale process): "
                    "give the job a port of its own, and --token (NETCHECK_TOKEN) on every node, so that "
                    "no unsigned value decides who gets a seat or an answer")


def interference_findings(interference: tuple[str, ...], severity: str = WARN) -> list[Finding]:
    """What another client did to the run's keys ("KEY what was seen"), one finding per key
    (the first MAX_STRANGERS; the rest in one): named as such and blaming no node. A warning
    where the run went on; a failure where it kept this node out."""
    findings = [Finding(check=RDZV_JOIN, severity=severity, nodes=(),
                        summary=f"another client interfered with the store key {text.split(' ')[0]}",
                        evidence=(text,), fix=INTERFERENCE_FIX,
                        kind=JOIN_INTERFERENCE) for text in interference[:MAX_STRANGERS]]
    if rest := interference[MAX_STRANGERS:]:
        findings.append(Finding(check=RDZV_JOIN, severity=severity, nodes=(),
                                summary=f"another client interfered with {len(rest)} more store keys",
                                evidence=rest[:MAX_STRANGERS], fix=INTERFERENCE_FIX, kind=JOIN_INTERFERENCE))
    return findings


STALL_FIX = ("torch's store looks up the name of every connection it accepts, on the one thread that answers "
             "every node: a client whose address's reverse DNS zone answers late holds all of them up. Let only "
             "the nodes reach the port (a firewall rule, a port of the job's own), or have the resolver answer "
             "for those addresses at once (/etc/hosts on the host, or a working reverse zone)")


def store_stall_findings(stalls: tuple[StoreStall, ...], members: tuple[Member, ...],
                         known: dict[str, str] | None = None) -> list[Finding]:
    """The host's store left its own request unanswered for seconds while clients that are no
    node of this run were connected to its port: one warning naming them (the first
    MAX_STRANGERS stalls as evidence), no node. A stall with only the nodes connected is the
    machine's load, not another client's doing, and is not raised. `known`: address -> name
    of the nodes the host knows of besides the seated ones (its /etc/hosts, the visitors'
    records): one of those is a node kept out, never a stranger."""
    ours = {a for m in members for a in set(address_owners(m.facts.nics)) | set(m.facts.hostname_addresses)}
    ours |= set(known or {})
    lines: list[str] = []
    strangers: dict[str, int] = {}   # address -> the most connections it held in one stall
    for stall in stalls:
        theirs = {a: n for a, n in stall.peers.items() if a not in ours and not is_loopback(a)}
        if theirs:
            strangers.update({a: max(n, strangers.get(a, 0)) for a, n in theirs.items()})
            lines.append(f"{stall.request}: no answer for {stall.seconds:g} s; connected meanwhile from no node of "
                         f"this run: {', '.join(f'{a} ({n})' for a, n in sorted(theirs.items())[:MAX_STRANGERS])}")
    if not strangers:
        return []
    named = ", ".join(sorted(strangers)[:MAX_STRANGERS]) + (" and more" if len(strangers) > MAX_STRANGERS else "")
    return [Finding(check=RDZV_JOIN, severity=WARN, nodes=(), summary=f"the host's store stalled for "
                    f"{sum(s.seconds for s in stalls):g} s while {named}, no node of this run, "
                    f"{'was' if len(strangers) == 1 else 'were'} connected to its port",
                    evidence=tuple(lines[:MAX_STRANGERS]), fix=STALL_FIX, kind=JOIN_STORE_STALLED)]


def held_up_findings(waits: tuple[float, ...]) -> list[Finding]:
    """A joiner's store requests that went unanswered past the reply timeout while the host's
    port still took connections, and were answered on a new connection: the store was held
    up (the host's report names by whom), not lost. A warning naming no node."""
    if not waits:
        return []
    return [Finding(check=RDZV_JOIN, severity=WARN, nodes=(),
                    summary=f"the host's store held this node's requests up {len(waits)} time(s), "
                    f"{max(waits):g} s at the longest, while its port still took connections: waited out on a new "
                    "connection (the host's report names who was connected)",
                    evidence=tuple(f"a request answered after {w:g} s" for w in waits[:MAX_STRANGERS]), fix=STALL_FIX,
                    kind=JOIN_STORE_STALLED)]


def stall_explained(findings: list[Finding], stalled: list[Finding]) -> list[Finding]:
    """A node that never joined, or stopped answering in a later phase, while another client
    held the host's store up (`stalled`, store_stall_findings) is named under the stall, its
    likely cause, not as missing or lost: its requests waited behind the stall, on the store's
    one thread, and it may have run out of time before the store answered (its own report
    says so). Still a failure: the node was not tested; but not its fault (no node's: another
    client's), so none is excluded for it."""
    if not stalled:
        return findings
    explained = [f for f in findings if f.kind == JOIN_MISSING or f.kind.startswith(LOST_PREFIX)]
    return [Finding(check=RDZV_JOIN, severity=FAIL, nodes=f.nodes,
                    summary=f"{f.summary}; meanwhile {stalled[0].summary}, which kept "
                    f"{'it' if len(f.nodes) == 1 else 'them'} out", evidence=f.evidence,
                    fix="read each such node's own report (rdzv.reach or rdzv.join: whether the store answered it "
                    "late); " + STALL_FIX, kind=JOIN_KEPT_OUT, cause_nodes=())
            if f in explained else f for f in findings]


def foreign_findings(foreign: tuple[Visitor, ...]) -> list[Finding]:
    """The first MAX_STRANGERS visitors of other runs one by one, the rest in one count: a
    flood of foreign records is named, and does not become the report."""
    fix = "two runs share this port: give each job its own port, or the same --rdzv-id if the node belongs here"
    findings = [Finding(check=RDZV_JOIN, severity=WARN, nodes=(),
                        summary=f"{v.hostname} joined this store with run id {v.run_id!r}; "
                        "not mixed into this run", fix=fix, kind=JOIN_FOREIGN) for v in foreign[:MAX_STRANGERS]]
    if rest := foreign[MAX_STRANGERS:]:
        runs = sorted({v.run_id for v in rest})
        findings.append(Finding(check=RDZV_JOIN, severity=WARN, nodes=(),
                                summary=f"{len(rest)} more visitors of {len(runs)} other "
                                "run id(s) joined this store; not mixed into this run",
                                evidence=tuple(f"run id {r!r}" for r in runs[:MAX_STRANGERS]), fix=fix,
                                kind=JOIN_FOREIGN))
    return findings


def malformed_findings(malformed: tuple[str, ...]) -> list[Finding]:
    fix = "something other than netcheck writes to this port"
    findings = [Finding(check=RDZV_JOIN, severity=WARN, nodes=(), summary="a store entry was rejected as malformed",
                        evidence=(text,), fix=fix, kind=JOIN_MALFORMED) for text in malformed[:MAX_STRANGERS]]
    if rest := malformed[MAX_STRANGERS:]:
        findings.append(Finding(check=RDZV_JOIN, severity=WARN, nodes=(),
                                summary=f"{len(rest)} more store entries were rejected as "
                                "malformed", evidence=rest[:MAX_STRANGERS], fix=fix, kind=JOIN_MALFORMED))
    return findings


def rejected_findings(rejected: list[tuple[int | None, str, str]], names: dict[int, str]) -> list[Finding]:
    """A seated node's value this node refused, as (the sender's rank, the key, why): its
    sender is at fault, not lost (the first MAX_STRANGERS; the rest were refused alike)."""
    return [Finding(check=RDZV_JOIN, severity=FAIL, nodes=() if rank is None else (rank,),
                    summary=f"{_sender(rank, names)} sent a value netcheck refused, under {key}", evidence=(why,),
                    fix="that node runs another netcheck version, or something else writes its keys: give "
                    "the job --token (NETCHECK_TOKEN) and its own port", kind=JOIN_MALFORMED)
            for rank, key, why in rejected[:MAX_STRANGERS]]


def _sender(rank: int | None, names: dict[int, str]) -> str:
    if rank is None:
        return "a client that is not a seated node"
    return f"node rank {rank} ({names[rank]})" if rank in names else f"node rank {rank}"


