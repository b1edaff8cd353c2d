"""This node's connection-tracking table (netfilter's nf_conntrack), read from /proc: at start-up
before netcheck opens a socket, again where a connect failed, and after the mesh. /proc/sys/net and
/proc/net show the reading process's own network namespace, as the job's processes will see it:
the count there is that namespace's, the limit (nf_conntrack_max) the machine's."""

from __future__ import annotations

from pathlib import Path

from netcheck.core.model import ConntrackTable

# /proc/net/stat/nf_conntrack's columns that tell a full table's doing (hex, a row per CPU)
COUNTERS = ("drop", "early_drop", "insert_failed")
MAX_STAT_ROWS = 4096   # CPUs: a row each


def read_conntrack(proc: str = "/proc") -> ConntrackTable | None:
    """The table's count, limit and counters; None where there is no table to read (the
    nf_conntrack module not loaded: nothing is tracked, nothing dropped for want of room)."""
    sysctl = Path(proc, "sys/net/netfilter")
    count, limit = _number(sysctl / "nf_conntrack_count"), _number(sysctl / "nf_conntrack_max")
    if count is None or limit is None:
        return None
    counters = stat_counters(Path(proc, "net/stat/nf_conntrack"))
    return ConntrackTable(count, limit, *(counters.get(name) for name in COUNTERS))


def stat_counters(path: Path) -> dict[str, int]:
    """COUNTERS summed over the CPUs' rows; {} where the file cannot be read or has none of them."""
    try:
        with open(path, encoding="ascii", errors="replace") as rows:
            names = next(rows, "").split()
            sums = {name: 0 for name in COUNTERS if name in names}
            for i, row in enumerate(rows):
                if i >= MAX_STAT_ROWS:
                    break
                values = row.split()
                for name in sums:
                    sums[name] += int(values[names.index(name)], 16)
            return sums
    except (OSError, ValueError, IndexError):
        return {}


def _number(path: Path) -> int | None:
    try:
        value = int(path.read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None
