"""netcheck as the scale benchmark's host, but with the store on torch's libuv backend:
the pre-bound socket is closed and TCPStore binds the port itself (libuv takes no listen
fd). Joiners that come in between are refused and retry. For benchmarks/scale.py
--store libuv only: netcheck itself keeps the legacy backend (RESULTS.md, "Scale").

    python benchmarks/_libuv_host.py NETCHECK-ARGS...
"""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from netcheck import cli  # noqa: E402
from netcheck.cluster import compat  # noqa: E402


def libuv_server_store(dist, port, timeout, listen_fd):
    os.close(listen_fd)
    server = dist.TCPStore("0.0.0.0", port, None, True, compat.connect_timeout(timeout),
                           wait_for_workers=False, use_libuv=True)
    server.set_timeout(timeout)
    return server


compat.server_store = libuv_server_store  # host_store calls it through the module
cli.entry()
