"""The *_SOCKET_IFNAME settings as each library reads them: a user's value checked against a
node's interfaces (validate_setting), and the values netcheck recommends written in each
library's syntax (format_nccl_value: prefixes, `^` and `=`; format_gloo_values: exact names,
per node where they differ). What each library picks is rules.socketchoice's. No I/O."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from netcheck.core.nictable import Nic, NicTable
from netcheck.rules.socketchoice import (
    LOOPBACK_V4,
    MAX_IFS,
    as_ip,
    bindable_owner,
    gloo_split,
    interface_names,
    nccl_find,
    nccl_matches,
    parse_nccl_ifname,
)


# src/include/socket.h: NCCL parses at most this many list entries and keeps at most this
# many interfaces.
@dataclass(frozen=True, kw_only=True)
class Problem:
    var: str
    value: str
    reason: str             # one line, naming this node's real interfaces


def validate_setting(var: str, value: str, table: NicTable) -> Problem | None:
    checks = {"NCCL_SOCKET_IFNAME": _check_nccl, "GLOO_SOCKET_IFNAME": _check_gloo,
              "TP_SOCKET_IFNAME": _check_tp}
    if var not in checks:
        raise ValueError(f"cannot validate {var}; known: {', '.join(checks)}")
    reason = checks[var](value, table)
    return Problem(var=var, value=value, reason=reason) if reason else None


def _check_nccl(value: str, table: NicTable) -> str | None:
    if len(value) <= 1:
        return "ignored: NCCL reads values of 2+ characters only, so its default rules apply"
    body = value.lstrip("^=")
    ip = next((e for e in body.split(",") if as_ip(e) or as_ip(e.split(":", 1)[0])), None)
    if ip:
        return f"holds an IP address ({_ip_owner(table, ip)}); NCCL matches interface-name " \
               "prefixes, so it matches no interface by that"
    spec = parse_nccl_ifname(value)
    if nccl_find(table, spec, None):
        return None
    named = [n.name for n in table.nics if nccl_matches(spec, n.name)]
    if named:
        return f"matches {', '.join(named)}, none running with an IP address: NCCL fails " \
               "with 'no socket interface found'"
    return f"matches no interface on this node ({interface_names(table)}): NCCL fails with " \
           "'no socket interface found'"


def _check_gloo(value: str, table: NicTable) -> str | None:
    if len(value) <= 1:
        return "ignored: torch reads values of 2+ characters only, so gloo uses the " \
               "hostname's address"
    for name in gloo_split(value):
        if not name:
            return "has an empty entry, which makes gloo use the hostname's address for it"
        failure = f'fails with "Unable to find address for: {name}"'
        down = "binds to it anyway and peers cannot reach it"
        reason = _check_exact_name(name, table, "gloo", failure, down)
        if reason:
            return reason
    return None


def _check_tp(value: str, table: NicTable) -> str | None:
    fallback = f"silently falls back to {LOOPBACK_V4}"
    if "," in value or not value:
        return f"TensorPipe takes one interface name: it looks {value!r} up as one, " \
               f"finds none and {fallback}"
    return _check_exact_name(value, table, "TensorPipe", fallback, f"skips it and {fallback}")


def _check_exact_name(name: str, table: NicTable, lib: str, failure: str, down: str) -> str | None:
    if as_ip(name):
        return f"holds an IP address ({_ip_owner(table, name)}); {lib} wants interface " \
               f"names and {failure}"
    nic = _nic(table, name)
    if nic is None or not nic.addresses:
        close = [n.name for n in table.nics if n.name.startswith(name.lstrip("^="))]
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        return f"no interface {name!r} with an IP address here ({interface_names(table)}); {lib} takes " \
               f"exact names, no prefixes, ^ or =, and {failure}{hint}"
    if not nic.running:
        return f"{name} is not running; {lib} {down}"
    return None


# --------------------------------------------------------------------------------------
# Recommendations


def format_nccl_value(
    names_per_node: Sequence[Sequence[str]],
    all_names_per_node: Sequence[Sequence[str]] | None = None,
) -> str | None:
    """One NCCL_SOCKET_IFNAME for the cluster from each node's working interface names.

    A name is usable only if it works wherever it exists (`all_names_per_node`, each
    node's every interface name; default: the working lists). A single name shared by
    all nodes is given plain when, as a prefix, it catches nothing else, else `=name`;
    different names give an exact `=a,b` list. None: no single value works (a name
    exists but does not work on some node), so set it per node.
    """
    known = all_names_per_node or names_per_node
    if not names_per_node or not all(names_per_node):
        return None
    safe = [n for n in _ordered_union(names_per_node)
            if all(n in works or n not in names for works, names in zip(names_per_node, known))]
    chosen = _cover(names_per_node, safe)
    if chosen is None or len(chosen) > MAX_IFS:  # parseStringList reads 16 entries
        return None
    if len(chosen) == 1 and _plain_prefix_ok(chosen[0], names_per_node, known):
        return chosen[0]
    return "=" + ",".join(chosen)


def _cover(names_per_node: Sequence[Sequence[str]], safe: list[str]) -> list[str] | None:
    # Greedy: the name working on most uncovered nodes first (ties: earliest seen).
    uncovered = set(range(len(names_per_node)))
    chosen: list[str] = []
    while uncovered:
        gain = {n: {i for i in uncovered if n in names_per_node[i]} for n in safe}
        best = max(safe, key=lambda n: len(gain[n]), default=None)
        if best is None or not gain[best]:
            return None
        chosen.append(best)
        uncovered -= gain[best]
    return chosen


def _plain_prefix_ok(name: str, names_per_node: Sequence[Sequence[str]], known: Sequence[Sequence[str]]) -> bool:
    # A plain value is a prefix (utils.cc matchIf) and must be 2+ characters to be read.
    caught = ((works, n) for works, names in zip(names_per_node, known) for n in names)
    return len(name) > 1 and all(n in works for works, n in caught if n.startswith(name))


def format_gloo_values(names_per_node: Sequence[Sequence[str]]) -> list[str | None]:
    """GLOO_SOCKET_IFNAME per node (also right for TP_SOCKET_IFNAME): one exact name each,
    the same name on every node when one works everywhere. One name, never a list:
    every rank must create the same number of gloo devices, since ProcessGroupGloo pairs
    device i's context across ranks. None for a node with no working interface."""
    union = _ordered_union(names_per_node)
    common = [n for n in union if all(n in names for names in names_per_node)]
    if common:
        return [common[0]] * len(names_per_node)
    return [names[0] if names else None for names in names_per_node]


# --------------------------------------------------------------------------------------
# Shared helpers


def _ip_owner(table: NicTable, text: str) -> str:
    owner = bindable_owner(table, text)
    return f"{text}, on {owner.name}" if owner else f"{text}, not on this node"


def _nic(table: NicTable, name: str) -> Nic | None:
    return next((n for n in table.nics if n.name == name), None)


def _ordered_union(lists: Sequence[Sequence[str]]) -> list[str]:
    return list(dict.fromkeys(n for names in lists for n in names))
