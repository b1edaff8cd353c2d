"""How long ago this process started, by the kernel's count since boot (/proc/self/stat's
start time against /proc/uptime): --timeout counts from the process's start, the interpreter's
and the imports' seconds included (5 s of them on a loaded machine), as a launcher's bound
around netcheck does; a step of the wall clock moves neither count."""

from __future__ import annotations

import os


def seconds_since_start() -> float:
    """Seconds since this process started; 0.0 where /proc cannot say."""
    try:
        with open("/proc/self/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()   # after "pid (comm)": state is the first
        with open("/proc/uptime") as uptime:
            up = float(uptime.read().split()[0])
        started = int(fields[19]) / os.sysconf("SC_CLK_TCK")   # stat's 22nd field: starttime, in ticks
    except (OSError, IndexError, ValueError):
        return 0.0
    return max(0.0, up - started)
