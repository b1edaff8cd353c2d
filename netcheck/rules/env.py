"""Phase 6, env: what differs between the nodes' environments, said the way a colleague would.

Pure rules over {node rank: EnvFacts}: no I/O, no torch. For each key whose value is not
the same everywhere, the majority value and the nodes out of line; keys that differ on the
same nodes for the same reason (a torch upgrade changes torch.version, torch.git_version,
nccl.* and a dozen pkg.nvidia-* at once) make one finding, so one cause reads as one line:

    FAIL env.mismatch  node3 has torch.version 2.13.0; the other 7 have 2.14.1 (and 4 more keys
                       differ on the same nodes)
    WARN env.mismatch  node5 has NCCL_IB_DISABLE=1; the other 7 have it unset
    WARN host.shm      /dev/shm on node2 is 64 MiB; its 8 GPUs need 1 GiB for NCCL (fails
                       below 256 MiB)

How much a difference matters is decided by one table, SEVERITY (README: "env.mismatch").
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

from netcheck.core.bwtext import size_words
from netcheck.core.envfacts import ABSENT, UNREADABLE, EnvFacts
from netcheck.core.model import FAIL, PASS, WARN, EnvRow, Finding
from netcheck.rules import majority
from netcheck.rules.pernode import every_node, hosts, node_names, per_node
from netcheck.rules.registry import ENV_HASH_UNREADABLE, ENV_MISMATCH, HOST_SHM

# host.shm: NCCL's intra-node SHM transport allocates ~9.2 MiB per connection (the
# "nccl-shm-recv-... (size 9637888)" segments), at least a send and a receive for each of
# at least 2 channels per GPU; below 32 MiB per GPU it cannot even set those up (nccl#1518:
# 4 GPUs failed in Docker's default 64 MiB, 2 GPUs passed). NCCL's troubleshooting guide
# asks containers for --shm-size=1g; more channels and peers take more, so 128 MiB per GPU.
SHM_FAIL_PER_GPU_BYTES = 32 << 20
SHM_WARN_FLOOR_BYTES = 1 << 30
SHM_WARN_PER_GPU_BYTES = 128 << 20

INFO = "info"     # differs legitimately per node: shown in the table, never flagged
SAME = "same"     # (table rows only) every node has this value

# Key pattern -> severity of a difference; first match wins (fnmatch, case-insensitive).
SEVERITY: dict[str, str] = {
    # Per node by nature: shown, never flagged.
    "*hostname*": INFO,
    "python.executable": INFO,          # venv paths differ; python.version and pkg.* say what runs
    "var.*SOCKET_IFNAME": INFO,         # interface names differ per node; the nic phase checks them
    "var.CUDA_VISIBLE_DEVICES": INFO,   # per-node GPU selection
    "var.NVIDIA_VISIBLE_DEVICES": INFO,
    "var.NCCL_HOSTID": INFO,            # NCCL's host identity (utils.cc getHostHash): one per host
    "var.MASTER_ADDR": INFO,            # Kubeflow hands the master pod "localhost", the others its
                                        # name; rdzv.reach and rdzv.resolve test the endpoint itself
    "var.CUDA_HOME": INFO,              # paths: the libraries they lead to are compared instead
    "var.CUDA_PATH": INFO,
    "var.LD_LIBRARY_PATH": INFO,
    "var.OMP_*": INFO,                  # CPU threading: speed, not correctness
    "gpu.*.uuid": INFO,                 # unique per GPU
    "nccl.library": INFO,               # a path; nccl.loaded is what it holds
    "cpu.*": INFO,
    "os.*": INFO,
    "shm.bytes": INFO,                  # judged per node by host.shm
    # Break a job (NCCL refuses mismatched versions or deadlocks; torch's collectives change).
    "torch.version": FAIL,
    "nccl.loaded": FAIL,
    "nccl.compiled": FAIL,
    "cuda.runtime": FAIL,
    "torch.*": FAIL,
    "pkg.torch": FAIL,
    "pkg.nvidia-nccl-*": FAIL,
    "hash.*": FAIL,                     # warn instead when a node could not hash it in full
    # May break a job.
    "driver.version": WARN,
    "python.*": WARN,
    "cudnn.version": WARN,
    "var.NCCL_*": WARN,
    "var.TORCH_NCCL_*": WARN,
    "file.*": WARN,                     # /etc/nccl.conf, ~/.nccl.conf, $NCCL_CONF_FILE
    "libc.version": WARN,               # extensions built on a newer glibc do not load on an older
    "gpu.*": WARN,
    "pkg.*": WARN,
    "var.*": WARN,
    "*": WARN,
}

# Key pattern -> the fix for a difference; {key}, {name} (the key after its family) and
# {majority} are filled in.
FIXES: dict[str, str] = {
    "torch.*": "install the same torch build on every node: the same version and CUDA tag, "
               "from the same index ({majority})",
    "pkg.torch": "install the same torch build on every node ({majority})",
    "nccl.*": "load one NCCL on every node: the same torch build and nvidia-nccl package, and no "
              "LD_LIBRARY_PATH or LD_PRELOAD that brings in another libnccl",
    "pkg.nvidia-nccl-*": "install the same {name} on every node ({majority})",
    "cuda.runtime": "install the same CUDA runtime on every node (it comes with the torch wheel)",
    "hash.*": "make {name} identical on every node (sync the code or data) before launching",
    "driver.version": "install the same NVIDIA driver on every node ({majority})",
    "python.*": "run the job with the same Python on every node ({majority})",
    "cudnn.version": "install the same cuDNN on every node ({majority})",
    "var.*": "set {name} to the same value on every node, or unset it everywhere (job script, "
             "container environment, ~/.bashrc)",
    "file.*": "make {name} the same on every node, or remove it: NCCL reads it besides the "
              "environment",
    "libc.version": "run the same OS image on every node",
    "gpu.*": "the nodes have different GPUs: use nodes of one kind, or expect the slowest to set "
             "the pace",
    "pkg.*": "install the same {name} on every node ({majority})",
    "*": "make {key} the same on every node",
}

# Keys compared as versions: "535.129.03" equals "535.129.3", "2.4" equals "2.4.0", and a
# build tag keeps builds apart ("2.13.0+cpu" is not "2.13.0+cu121").
VERSION_KEYS = ("torch.version", "nccl.loaded", "nccl.compiled", "cuda.runtime",
                "cudnn.version", "driver.version", "python.version", "pkg.*")
_VERSION = re.compile(r"v?(\d+(?:\.\d+)*)(.*?)(?:\+(\S+))?")
_SEVERITY_ORDER = {FAIL: 0, WARN: 1, INFO: 2, SAME: 3}
_HEX = re.compile(r"\b([0-9a-f]{12})[0-9a-f]{20,}\b")
SUMMARY_VALUE_CHARS = 60


@dataclass(frozen=True)
class Split:
    """One key across the nodes: its value groups, largest first, and the majority if any."""

    key: str
    severity: str                              # from SEVERITY, or SAME
    groups: tuple[tuple[str, tuple[int, ...]], ...]  # (value, ranks)
    majority: str | None                       # None: no value is held by more nodes than any other

    @property
    def odd_ranks(self) -> tuple[int, ...]:
        return tuple(sorted(r for v, ranks in self.groups if v != self.majority for r in ranks))


# ---------------------------------------------------------------------------- the table

def _first_match(key: str, table: Mapping[str, str]) -> tuple[int, str]:
    for i, (pattern, value) in enumerate(table.items()):
        if fnmatchcase(key.lower(), pattern.lower()):
            return i, value
    return len(table), table["*"]


def severity_of(key: str) -> str:
    return _first_match(key, SEVERITY)[1]


def version_key(text: str) -> tuple[tuple[int, ...], str, str] | None:
    """(release numbers without trailing zeros, pre-release, build tag); None if no version."""
    match = _VERSION.fullmatch(text.strip())
    if not match:
        return None
    numbers = [int(n) for n in match.group(1).split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers), match.group(2).lstrip("-._").lower(), (match.group(3) or "").lower()


def version_change(a: str, b: str) -> str | None:
    """How two versions differ: None (the same), "release", "pre-release", "build", or
    "value" when either is not a version."""
    ka, kb = version_key(a), version_key(b)
    if ka is None or kb is None:
        return None if a == b else "value"
    for name, x, y in zip(("release", "pre-release", "build"), ka, kb):
        if x != y:
            return name
    return None


def _is_version_key(key: str) -> bool:
    return any(fnmatchcase(key, p) for p in VERSION_KEYS)


def _missing(key: str) -> str:
    family = key.split(".", 1)[0]
    return {"pkg": ABSENT, "var": "unset"}.get(family, "not recorded")


# ---------------------------------------------------------------------------- comparison

def compare(facts_by_rank: Mapping[int, EnvFacts]) -> list[Split]:
    """Every key any node recorded, with its value groups; ordered as the report shows them."""
    alike = _alike(facts_by_rank)
    keys = sorted({k for values, _ in alike for k in values})
    splits = [_split(key, alike) for key in keys]
    return sorted(splits, key=lambda s: (_SEVERITY_ORDER[s.severity],
                                         _first_match(s.key, SEVERITY)[0], s.key))


def _alike(facts_by_rank: Mapping[int, EnvFacts]) -> list[tuple[Mapping[str, str], list[int]]]:
    """Each distinct record of values with the ranks holding it, in rank order: a torchrun
    node's ranks, and often a whole cluster, hold one (decoded once: fields.SHARED), so each
    key is looked up once a record, not 100,000 times."""
    held: dict[int, tuple[Mapping[str, str], list[int]]] = {}
    for rank in sorted(facts_by_rank):
        values = facts_by_rank[rank].values
        held.setdefault(id(values), (values, []))[1].append(rank)
    return list(held.values())


def _split(key: str, alike: list[tuple[Mapping[str, str], list[int]]]) -> Split:
    """Versions that differ only in how they are written (2.13.0 vs 2.13.0.post0) group
    together, shown as the first node's spelling."""
    missing, versioned = _missing(key), _is_version_key(key)
    grouped_by: dict[str, object] = {}   # each value parsed once: 4,096 nodes hold a few values
    shown: dict[object, str] = {}
    members: dict[object, list[int]] = {}
    for values, ranks in alike:   # by their first rank: the first seen is the first node's spelling
        value = values.get(key, missing)
        if value not in grouped_by:
            grouped_by[value] = (version_key(value) if versioned else None) or value
        group = grouped_by[value]
        shown.setdefault(group, value)
        members.setdefault(group, []).extend(ranks)
    split = majority.split_grouped({group: sorted(ranks) for group, ranks in members.items()})
    groups = tuple((shown[v], ranks) for v, ranks in split.groups)
    top = groups[0][0] if split.has_majority else None
    if len(groups) == 1:
        return Split(key, SAME, groups, top)
    return Split(key, _severity(key, groups), groups, top)


def _severity(key: str, groups: Sequence[tuple[str, Sequence[int]]]) -> str:
    severity = severity_of(key)
    if severity == FAIL and key.startswith("hash.") and any(
            v.startswith("incomplete") for v, _ in groups):
        return WARN   # a node that stopped at the bound cannot be said to hold other content
    return severity


# ---------------------------------------------------------------------------- findings

def env_findings(facts_by_rank: Mapping[int, EnvFacts],
                 hostnames: Mapping[int, str]) -> list[Finding]:
    """env.mismatch: one finding per set of keys that differ on the same nodes at one severity.

    Grouping by (severity, how the nodes split) keeps one cause to one line, with every key
    and value in its evidence, while unrelated differences stay separate findings, each
    naming its own nodes (which the healthy/faulty lists and the exit code build on).
    """
    ranks = tuple(sorted(facts_by_rank))
    if len(ranks) < 2:
        return [Finding(check=ENV_MISMATCH, severity=PASS, nodes=ranks, summary="one node: no environment to compare")]
    # Under torchrun every worker process is a rank: the counts said are of nodes.
    splits = compare(facts_by_rank)
    flagged: dict[tuple, list[Split]] = defaultdict(list)
    for s in splits:
        if s.severity in (FAIL, WARN) and not _unreadable(s):   # hash_findings names those nodes
            flagged[(s.severity, frozenset(frozenset(r) for _, r in s.groups))].append(s)
    findings = [_finding(group, hostnames) for group in flagged.values()]
    if not findings:
        findings.append(_agree(ranks, splits, hostnames))
    return findings


def hash_findings(facts_by_rank: Mapping[int, EnvFacts], hostnames: Mapping[int, str]) -> list[Finding]:
    """A --hash path some node cannot read, one finding a path naming those nodes: nodes that
    all fail to read it the same way agree about nothing, and one that cannot read what the
    others can holds other content, as far as the job can tell."""
    findings = []
    for s in compare(facts_by_rank):
        if not _unreadable(s):
            continue
        ranks = tuple(sorted(r for value, rs in s.groups if value.startswith(UNREADABLE) for r in rs))
        path = s.key.removeprefix("hash.")
        others = " (the other nodes read it)" if len(ranks) < len(facts_by_rank) else ""
        findings.append(Finding(check=ENV_MISMATCH, severity=FAIL, nodes=ranks,
                                summary=f"--hash {path}: {node_names(ranks, hostnames)} cannot "
                                f"read it{others}, so nothing was compared there",
                                evidence=per_node(((r, facts_by_rank[r].values.get(s.key, "")) for r in ranks),
                                                  hostnames),
                                fix=f"check the path on {node_names(ranks, hostnames)}: a typo, a shared filesystem "
                                "not mounted there, or permissions netcheck's user lacks", kind=ENV_HASH_UNREADABLE))
    return findings


def _unreadable(s: Split) -> bool:
    return s.key.startswith("hash.") and any(value.startswith(UNREADABLE) for value, _ in s.groups)


def _finding(splits: list[Split], hostnames: Mapping[int, str]) -> Finding:
    head = splits[0]
    summary = sentence(head, hostnames)
    more = len(splits) - 1
    if more:
        keys = f"{more} more keys differ" if more > 1 else "1 more key differs"
        summary += f" (and {keys} on the same nodes)"
    evidence = tuple(f"{s.key}: {value} on {_row(s, value, r, hostnames).nodes}"
                     for s in splits for value, r in _odd_first(s))
    nodes = head.odd_ranks if head.majority is not None else tuple(sorted(
        r for _, ranks in head.groups for r in ranks))
    return Finding(check=ENV_MISMATCH, severity=head.severity, nodes=nodes, summary=summary, evidence=evidence,
                   fix=fix_for(head))


def _agree(ranks: tuple[int, ...], splits: list[Split], hostnames: Mapping[int, str]) -> Finding:
    info = [s.key for s in splits if s.severity == INFO]
    count = hosts(ranks, hostnames)
    who = (f"{count} nodes" + (f" ({len(ranks)} ranks)" if len(ranks) > count else "")) if count > 1 else \
        f"the {len(ranks)} ranks on {node_names(ranks, hostnames)}"
    summary = f"{who} agree on {len(splits) - len(info)} environment keys"
    if info:
        summary += f"; {len(info)} more differ as expected per node"
    return Finding(check=ENV_MISMATCH, severity=PASS, nodes=ranks, summary=summary,
                   evidence=tuple(f"differs per node, not flagged: {k}" for k in info))


def fix_for(split: Split) -> str:
    name = split.key.split(".", 1)[-1]
    majority = f"{split.majority} on most nodes" if split.majority is not None else \
        "no majority: pick one"
    return _first_match(split.key, FIXES)[1].format(key=split.key, name=name, majority=majority)


def sentence(split: Split, hostnames: Mapping[int, str]) -> str:
    """The finding's summary, e.g. "node3 has torch.version 2.13.0; the other 7 have 2.14.1",
    or with no majority "torch.version differs on every node: node0 has 2.13.0, ..."."""
    if split.majority is None:
        parts = [f"{node_names(r, hostnames)} {_has(r, hostnames)} {_show(split.key, v, True)}"
                 for v, r in split.groups]
        if all(hosts(r, hostnames) == 1 for _, r in split.groups):
            return f"{split.key} differs on every node: " + ", ".join(parts)
        return f"{split.key} splits the nodes with no majority: " + "; ".join(parts)
    odd = [(v, r) for v, r in split.groups if v != split.majority]
    parts = [f"{node_names(r, hostnames)} {_has(r, hostnames)} {_show(split.key, v, i > 0)}"
             for i, (v, r) in enumerate(odd)]
    others = hosts(split.groups[0][1], hostnames)
    text = f"{', '.join(parts)}; the other {others} have {_show(split.key, split.majority, True)}"
    if _is_version_key(split.key) and all(
            version_change(v, split.majority) == "build" for v, _ in odd):
        text += " (the same release, another build)"
    return text


def _show(key: str, value: str, again: bool) -> str:
    """A value as the sentence names it; `again`: the key was named earlier in the sentence."""
    family, _, name = key.partition(".")
    value = _short(value)
    if family == "var":
        return ("it unset" if again else f"{name} unset") if value == "unset" else f"{name}={value}"
    if family == "pkg":
        return ("none" if again else f"no {name}") if value == ABSENT else \
            (value if again else f"{name} {value}")
    return value if again else f"{key} {value}"


def _short(value: str) -> str:
    value = _HEX.sub(r"\1…", value)
    return value if len(value) <= SUMMARY_VALUE_CHARS else value[:SUMMARY_VALUE_CHARS - 1] + "…"


def _has(ranks: tuple[int, ...], hostnames: Mapping[int, str]) -> str:
    return "has" if hosts(ranks, hostnames) == 1 else "have"


def _odd_first(split: Split) -> list[tuple[str, tuple[int, ...]]]:
    return sorted(split.groups, key=lambda g: g[0] == split.majority)


# ---------------------------------------------------------------------------- table

def env_differences(facts_by_rank: Mapping[int, EnvFacts], hostnames: Mapping[int, str],
                    verbose: bool = False) -> list[EnvRow]:
    """Rows for the env table: differing keys (odd nodes first), every key when verbose.

    Without verbose, a per-node key with no majority (GPU UUIDs, CPU models) is one row
    saying so, not one row per node.
    """
    total = hosts(facts_by_rank, hostnames)
    rows: list[EnvRow] = []
    for s in compare(facts_by_rank):
        if s.severity == SAME:
            if verbose:
                rows.append(EnvRow(s.key, s.groups[0][0], s.groups[0][1], f"all {total}", SAME))
        elif s.severity == INFO and s.majority is None and not verbose:
            rows.append(EnvRow(s.key, "(differs per node)", tuple(sorted(facts_by_rank)),
                               f"all {total}", INFO))
        else:
            rows += [_row(s, v, r, hostnames) for v, r in _odd_first(s)]
    return rows


def _row(s: Split, value: str, ranks: tuple[int, ...], hostnames: Mapping[int, str]) -> EnvRow:
    nodes = f"the other {hosts(ranks, hostnames)}" if value == s.majority else node_names(ranks, hostnames)
    return EnvRow(s.key, value, ranks, nodes, s.severity)


# ---------------------------------------------------------------------------- host.shm

def shm_thresholds(gpus: int) -> tuple[int, int]:
    """(fail below, warn below) bytes of /dev/shm for a node with `gpus` GPUs (constants.py
    gives the reasoning: NCCL's SHM segments per GPU, and its guide's --shm-size=1g)."""
    return SHM_FAIL_PER_GPU_BYTES * gpus, max(SHM_WARN_FLOOR_BYTES, SHM_WARN_PER_GPU_BYTES * gpus)


@dataclass(frozen=True, kw_only=True)
class _Shm:
    severity: str
    name: str
    summary: str        # the finding's summary when this node is the only one
    line: str           # its evidence line, after the node's name
    warn_below: int     # bytes recommended (0: no GPUs, or the size is unknown)
    gpus: int = 0


def shm_findings(facts_by_rank: Mapping[int, EnvFacts],
                 hostnames: Mapping[int, str]) -> list[Finding]:
    """host.shm: /dev/shm too small for the GPUs on a node; one finding per severity, a line
    per node (torchrun's ranks of one host share its /dev/shm)."""
    verdicts = {r: _shm_verdict(f.values, hostnames.get(r) or f"rank {r}")
                for r, f in sorted(facts_by_rank.items())}
    names = {r: v.name for r, v in verdicts.items()}
    findings = []
    for severity in (FAIL, WARN):
        ranks = tuple(r for r, v in verdicts.items() if v.severity == severity)
        if ranks:
            findings.append(_shm_finding(severity, ranks, verdicts, names))
    if not findings and verdicts:
        findings.append(Finding(check=HOST_SHM, severity=PASS, nodes=tuple(verdicts),
                                summary=_shm_pass(verdicts, names),
                                evidence=per_node(((r, v.line) for r, v in verdicts.items()), names)))
    return findings


def _shm_pass(verdicts: dict[int, _Shm], names: dict[int, str]) -> str:
    """What a pass covers: the nodes with GPUs, and those without (NCCL's SHM transport is
    between GPUs: a node without one does not use it)."""
    with_gpus = [r for r, v in verdicts.items() if v.gpus]
    without = [r for r in verdicts if r not in with_gpus]
    if not with_gpus:
        where = every_node(verdicts, names)
        return ("no node has GPUs" if where == "every node" else f"{where} has no GPUs") + \
            ": NCCL's shared-memory transport is not used, whatever the size of /dev/shm"
    summary = f"/dev/shm is large enough for the GPUs on {every_node(with_gpus, names)}" if not without else \
        f"/dev/shm is large enough for the GPUs on {node_names(with_gpus, names)}"
    return summary + (f"; {node_names(without, names)} {'has' if hosts(without, names) == 1 else 'have'} no GPUs"
                      if without else "")


def _shm_verdict(values: Mapping[str, str], name: str) -> _Shm:
    gpus, shm = _count(values.get("gpu.count")) or 0, _count(values.get("shm.bytes"))
    if gpus == 0:
        return _Shm(severity=PASS, name=name, summary="", line="no GPUs, NCCL's shared memory is not needed",
                    warn_below=0)
    if shm is None:
        reading = values.get("shm.bytes", "not recorded")
        return _Shm(severity=WARN, name=name, summary=f"the size of /dev/shm on {name} is unknown ({reading})",
                    line=f"/dev/shm {reading}", warn_below=0, gpus=gpus)
    fail_below, warn_below = shm_thresholds(gpus)
    severity = FAIL if shm < fail_below else WARN if shm < warn_below else PASS
    have, need, floor = size_words(shm), size_words(warn_below), size_words(fail_below)
    return _Shm(severity=severity, name=name,
                summary=f"/dev/shm on {name} is {have}; its {gpus} GPUs need {need} for NCCL "
                f"(fails below {floor})",
                line=f"/dev/shm {have}, {gpus} GPUs: fails below {floor}, {need} recommended",
                warn_below=warn_below, gpus=gpus)


def _shm_finding(severity: str, ranks: tuple[int, ...], verdicts: dict[int, _Shm], names: dict[int, str]) -> Finding:
    nodes = [verdicts[r] for r in ranks]
    unknown = "" if all(n.warn_below for n in nodes) else " or of unknown size"
    count = hosts(ranks, names)
    summary = nodes[0].summary if count == 1 else (
        f"/dev/shm is too small for NCCL{unknown} on {count} nodes: {node_names(ranks, names)}")
    size = max(1, -(-max(n.warn_below for n in nodes) // SHM_WARN_FLOOR_BYTES))   # GiB, rounded up
    return Finding(check=HOST_SHM, severity=severity, nodes=ranks, summary=summary,
                   evidence=per_node(((r, verdicts[r].line) for r in ranks), names),
                   fix=f"give the node more shared memory: docker run --shm-size={size}g (Kubernetes: "
                   "an emptyDir with medium: Memory mounted at /dev/shm; a host: mount -o "
                   f"remount,size={size}G /dev/shm); NCCL_SHM_DISABLE=1 avoids it at a cost in "
                   "intra-node bandwidth")


def _count(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None
